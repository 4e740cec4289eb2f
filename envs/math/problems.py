r"""Graded maths problems with known answers, generated from a seed (no data files).

Four kinds, each with levels 1 (one easy step) to 5 (several steps, larger
numbers, fractions or negative results):

- ``arithmetic``: an integer expression with ``+ - × ÷`` and parentheses
  (every division is exact), e.g. ``(36 + 12) ÷ 8 × 5``;
- ``fractions``: sums, differences, products and quotients of fractions,
  written in LaTeX, e.g. ``$\frac{3}{4} + \frac{5}{6}$``;
- ``linear``: a linear equation in ``x``, from ``x + 7 = 12`` to
  ``3(x + 2) = 5(x - 1) + 4``;
- ``word``: short word problems (shopping, change, speed, ages, discounts,
  perimeters, percentages, work rates), one to four steps.

>>> import numpy as np
>>> problem = generate_problem(np.random.default_rng(0), "linear", 3)
>>> problem.kind, problem.level
('linear', 3)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from agentgym.errors import ConfigError

__all__ = ["KINDS", "LEVELS", "MathProblem", "format_number", "generate_problem"]

KINDS = ("arithmetic", "fractions", "linear", "word")
LEVELS = (1, 2, 3, 4, 5)


@dataclass(frozen=True, slots=True)
class MathProblem:
    """A question and its reference answer (LaTeX or plain text)."""

    question: str
    answer: str
    #: ``arithmetic``, ``fractions``, ``linear``, ``word``, or where it came from (``dataset``).
    kind: str = "custom"
    #: Difficulty 1 to 5 for generated problems; 0 when unknown.
    level: int = 0


def format_number(value: Fraction) -> str:
    """An integer as ``"42"``, a short terminating decimal as ``"2.75"``, else ``"7/3"``."""
    if value.denominator == 1:
        return str(value.numerator)
    for places in range(1, 7):
        scaled = value * 10**places
        if scaled.denominator == 1:
            sign = "-" if scaled < 0 else ""
            digits = str(abs(scaled.numerator)).rjust(places + 1, "0")
            return f"{sign}{digits[:-places]}.{digits[-places:]}"
    return f"{value.numerator}/{value.denominator}"


def generate_problem(rng: np.random.Generator, kind: str, level: int) -> MathProblem:
    """A new problem of ``kind`` (one of :data:`KINDS`) at ``level`` (1 to 5)."""
    if kind not in _GENERATORS:
        raise ConfigError(f"kind must be one of {KINDS}, got {kind!r}.")
    if level not in LEVELS:
        raise ConfigError(f"level must be one of {LEVELS}, got {level!r}.")
    return _GENERATORS[kind](rng, level)


def _int(rng: np.random.Generator, low: int, high: int) -> int:
    """A uniform integer in ``[low, high]`` (both included)."""
    return int(rng.integers(low, high + 1))


def _pick(rng: np.random.Generator, items: tuple[str, ...]) -> str:
    return items[int(rng.integers(len(items)))]


# -- expressions: arithmetic and fractions -------------------------------------

_ATOM, _PRODUCT, _SUM = 3, 2, 1
_Item = tuple[Fraction, str, int]  # value, text, precedence of its top operator


def _combine_randomly(
    rng: np.random.Generator,
    atoms: list[tuple[Fraction, str]],
    ops: str,
    symbols: dict[str, str],
    *,
    integers_only: bool,
    nonnegative: bool,
) -> tuple[Fraction, str]:
    """Join ``atoms`` with random operators from ``ops`` into one expression.

    With ``integers_only`` every division is exact; with ``nonnegative`` a
    subtraction takes the larger value first. Parentheses only where needed.
    """
    items: list[_Item] = [(value, text, _ATOM) for value, text in atoms]
    while len(items) > 1:
        a = items.pop(int(rng.integers(len(items))))
        b = items.pop(int(rng.integers(len(items))))
        allowed = [op for op in ops if _allowed(op, a[0], b[0], integers_only)]
        op = allowed[int(rng.integers(len(allowed)))]
        if op == "-" and nonnegative and a[0] < b[0]:
            a, b = b, a
        items.append(_join(a, b, op, symbols))
    return items[0][0], items[0][1]


def _allowed(op: str, left: Fraction, right: Fraction, integers_only: bool) -> bool:
    if op != "/":
        return True
    if right == 0 or right == 1:
        return False
    return not integers_only or (left / right).denominator == 1


def _join(a: _Item, b: _Item, op: str, symbols: dict[str, str]) -> _Item:
    need_left = _SUM if op in "+-" else _PRODUCT
    need_right = {"+": _SUM, "-": _PRODUCT, "*": _PRODUCT, "/": _ATOM}[op]
    left = a[1] if a[2] >= need_left else f"({a[1]})"
    right = b[1] if b[2] >= need_right else f"({b[1]})"
    value = {"+": a[0] + b[0], "-": a[0] - b[0], "*": a[0] * b[0]}.get(op)
    if value is None:
        value = a[0] / b[0]
    return value, f"{left} {symbols[op]} {right}", _SUM if op in "+-" else _PRODUCT


# level -> (operands, largest number, operators, results may be negative)
_ARITHMETIC = {
    1: (2, 20, "+-", False),
    2: (3, 30, "+-*", False),
    3: (3, 60, "+-*/", False),
    4: (4, 99, "+-*/", False),
    5: (5, 99, "+-*/", True),
}
_PLAIN = {"+": "+", "-": "-", "*": "×", "/": "÷"}


def _arithmetic(rng: np.random.Generator, level: int) -> MathProblem:
    operands, largest, ops, negative = _ARITHMETIC[level]
    atoms = [(Fraction(n), str(n)) for n in (_int(rng, 1, largest) for _ in range(operands))]
    value, text = _combine_randomly(rng, atoms, ops, _PLAIN, integers_only=True,
                                    nonnegative=not negative)
    return MathProblem(f"Compute {text}.", format_number(value), "arithmetic", level)


# level -> (operands, largest denominator, operators, results may be negative)
_FRACTIONS = {
    1: (2, 9, "+-", False),
    2: (2, 12, "+-", False),
    3: (2, 12, "*/", False),
    4: (3, 12, "+-*/", False),
    5: (3, 15, "+-*/", True),
}
_LATEX = {"+": "+", "-": "-", "*": r"\times", "/": r"\div"}


def _fractions(rng: np.random.Generator, level: int) -> MathProblem:
    operands, largest, ops, negative = _FRACTIONS[level]
    shared = _int(rng, 2, largest)  # level 1 uses one denominator for both
    atoms = []
    for _ in range(operands):
        denominator = shared if level == 1 else _int(rng, 2, largest)
        numerator = _int(rng, 1, denominator - 1) if level <= 2 else _int(rng, 1, 2 * denominator)
        atoms.append((Fraction(numerator, denominator), rf"\frac{{{numerator}}}{{{denominator}}}"))
    value, text = _combine_randomly(rng, atoms, ops, _LATEX, integers_only=False,
                                    nonnegative=not negative)
    return MathProblem(
        f"Compute ${text}$. Give the result as a fraction in lowest terms (or a whole number).",
        str(value), "fractions", level,  # str(Fraction): "7" or "7/3", in lowest terms
    )


# -- linear equations ----------------------------------------------------------


def _term(coefficient: int, name: str = "x") -> str:
    if coefficient == 1:
        return name
    if coefficient == -1:
        return f"-{name}"
    return f"{coefficient}{name}"


def _plus(constant: int) -> str:
    """`` + 5``, `` - 5`` or nothing, to follow a term."""
    if constant == 0:
        return ""
    return f" + {constant}" if constant > 0 else f" - {-constant}"


def _linear(rng: np.random.Generator, level: int) -> MathProblem:
    x = Fraction(_int(rng, 1, 20) if level <= 2 else _int(rng, -12, 12))
    if level == 1:
        a = _int(rng, 1, 30) * (1 if rng.random() < 0.5 else -1)
        equation = f"x{_plus(a)} = {x + a}"
    elif level == 2:
        a = _int(rng, 2, 12)
        equation = f"{a}x = {a * x}"
    elif level == 3:
        a, b = _int(rng, 2, 9) * (1 if rng.random() < 0.8 else -1), _int(rng, -30, 30)
        equation = f"{_term(a)}{_plus(b)} = {a * x + b}"
    elif level == 4:
        a, c = _int(rng, 2, 9), _int(rng, 1, 8)
        c = c if c != a else a + 1
        b = _int(rng, -20, 20)
        d = int(a * x + b - c * x)
        equation = f"{_term(a)}{_plus(b)} = {_term(c)}{_plus(d)}"
    else:
        return _linear_with_fraction(rng)
    return MathProblem(f"Solve for x: {equation}.", format_number(x), "linear", level)


def _linear_with_fraction(rng: np.random.Generator) -> MathProblem:
    # a(x + b) = c(x - d) + e  =>  x = (e - c*d - a*b) / (a - c), often a fraction.
    a, c = _int(rng, 2, 9), _int(rng, 2, 9)
    c = c if c != a else a + 1
    b, d, e = _int(rng, 1, 9), _int(rng, 1, 9), _int(rng, -20, 20)
    x = Fraction(e - c * d - a * b, a - c)
    equation = f"{a}(x + {b}) = {c}(x - {d}){_plus(e)}"
    return MathProblem(f"Solve for x: {equation}. Give x exactly (a fraction if needed).",
                       str(x), "linear", 5)


# -- word problems -------------------------------------------------------------

_NAMES = ("Ada", "Bo", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivo", "Jun", "Kemal",
          "Lena", "Mateo", "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tomas")
_ITEMS = ("notebook", "apple", "pencil", "ticket", "mug", "sticker", "candle", "plant")
_THINGS = ("marbles", "cards", "stamps", "shells", "coins", "beads")
_Word = Callable[[np.random.Generator], tuple[str, Fraction]]


def _shopping(rng: np.random.Generator) -> tuple[str, Fraction]:
    name, item, n, price = _pick(rng, _NAMES), _pick(rng, _ITEMS), _int(rng, 2, 12), _int(rng, 2, 15)
    return (f"{name} buys {n} {item}s at ${price} each. How many dollars does {name} spend?",
            Fraction(n * price))


def _sharing(rng: np.random.Generator) -> tuple[str, Fraction]:
    name, things, each, friends = _pick(rng, _NAMES), _pick(rng, _THINGS), _int(rng, 2, 15), _int(rng, 2, 9)
    return ((f"{name} has {each * friends} {things} and shares them equally among {friends} "
            f"friends. How many {things} does each friend get?"), Fraction(each))


def _change(rng: np.random.Generator) -> tuple[str, Fraction]:
    name, item, n, price = _pick(rng, _NAMES), _pick(rng, _ITEMS), _int(rng, 2, 9), _int(rng, 2, 9)
    bill = next(b for b in (20, 50, 100) if b > n * price)
    return ((f"{name} buys {n} {item}s at ${price} each and pays with a ${bill} bill. "
            f"How many dollars of change does {name} get?"), Fraction(bill - n * price))


def _speed(rng: np.random.Generator) -> tuple[str, Fraction]:
    speed, hours, minutes = 10 * _int(rng, 3, 12), _int(rng, 1, 5), 30 * _int(rng, 0, 1)
    time = f"{hours} hours" + (" and 30 minutes" if minutes else "")
    return ((f"A train travels at {speed} km per hour for {time}. How many kilometres does it "
            "travel?"), Fraction(speed) * (hours + Fraction(minutes, 60)))


def _ages(rng: np.random.Generator) -> tuple[str, Fraction]:
    old, young = _pick(rng, _NAMES[:10]), _pick(rng, _NAMES[10:])
    age, times, years = _int(rng, 3, 15), _int(rng, 2, 4), _int(rng, 2, 10)
    total = age + times * age + 2 * years
    return ((f"{old} is {times} times as old as {young}. In {years} years the sum of their ages "
            f"will be {total}. How old is {young} now?"), Fraction(age))


def _discount(rng: np.random.Generator) -> tuple[str, Fraction]:
    item, price = _pick(rng, _ITEMS), 20 * _int(rng, 1, 15)
    off = int(rng.choice([10, 15, 20, 25, 30, 40, 50]))
    return ((f"A {item} costs ${price}. It is sold at {off}% off. What is the sale price in "
            "dollars?"), Fraction(price * (100 - off), 100))


def _rectangle(rng: np.random.Generator) -> tuple[str, Fraction]:
    width, more = _int(rng, 2, 20), _int(rng, 1, 10)
    perimeter = 2 * (2 * width + more)
    return ((f"A rectangle is {more} cm longer than it is wide, and its perimeter is {perimeter} cm. "
            "What is its area in square centimetres?"), Fraction(width * (width + more)))


def _reading(rng: np.random.Generator) -> tuple[str, Fraction]:
    name, monday, fewer = _pick(rng, _NAMES), _int(rng, 5, 40), _int(rng, 1, 5)
    return ((f"{name} reads {monday} pages on Monday, twice as many on Tuesday, and {fewer} fewer "
            f"than on Tuesday on Wednesday. How many pages does {name} read in the three days?"),
            Fraction(monday + 2 * monday + 2 * monday - fewer))


def _left_over(rng: np.random.Generator) -> tuple[str, Fraction]:
    things, count = _pick(rng, _THINGS), 100 * _int(rng, 1, 9)
    morning, afternoon = 10 * _int(rng, 1, 6), 10 * _int(rng, 1, 6)
    left = Fraction(count * (100 - morning) * (100 - afternoon), 10_000)
    return ((f"A shop has {count} {things}. It sells {morning}% of them in the morning and "
            f"{afternoon}% of the rest in the afternoon. How many {things} are left?"), left)


def _pipes(rng: np.random.Generator) -> tuple[str, Fraction]:
    first, second = _int(rng, 2, 8), _int(rng, 2, 12)
    return ((f"One pipe fills a tank in {first} hours and another fills it in {second} hours. "
            "How many hours do they take to fill it together?"),
            Fraction(first * second, first + second))


_WORD: dict[int, tuple[_Word, ...]] = {
    1: (_shopping, _sharing),
    2: (_change, _speed),
    3: (_ages, _discount),
    4: (_rectangle, _reading),
    5: (_left_over, _pipes),
}


def _word(rng: np.random.Generator, level: int) -> MathProblem:
    templates = _WORD[level]
    question, value = templates[int(rng.integers(len(templates)))](rng)
    return MathProblem(question, format_number(value), "word", level)


_GENERATORS: dict[str, Callable[[np.random.Generator, int], MathProblem]] = {
    "arithmetic": _arithmetic,
    "fractions": _fractions,
    "linear": _linear,
    "word": _word,
}
