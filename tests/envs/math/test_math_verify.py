r"""The answer checker: a table of answer pairs and math-verify's verdicts on them.

Each row is (reference, answer). ``EQUAL`` and ``NOT_EQUAL`` are what a
reader expects and math-verify agrees. ``SURPRISES`` are pairs where a reader
might expect the other verdict; the test pins math-verify's verdict (0.9.0)
and the comment says why it decides so, so a change of behaviour shows up.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentgym.envs.math.verify import MAX_ANSWER_CHARS, check_answer, check_answer_here

EQUAL = [
    # fractions, decimals and LaTeX fraction commands
    ("1/2", "0.5"),
    (r"\frac{1}{2}", "0.5"),
    (r"\frac{1}{2}", r"\dfrac{1}{2}"),
    ("0.75", r"\tfrac{3}{4}"),
    (r"\frac{1}{2}", r"\frac12"),
    ("1/2", "2/4"),  # an unreduced fraction has the same value
    ("3/2", "1.5"),
    ("2.5", r"2\frac{1}{2}"),  # a mixed number
    ("-0.5", r"-\frac{1}{2}"),
    ("-0.5", r"\frac{-1}{2}"),
    ("1/3", "0.3333333"),  # floats are compared to 6 decimal places
    (r"\sqrt{2}", "1.41421356"),
    # formatting: thousands separators, leading zeros, trailing zeros
    ("1000", "1,000"),
    ("1000", "1{,}000"),
    ("1000000", "1,000,000"),
    ("7", "007"),
    ("7", "7.0"),
    ("1000", "10^3"),
    # percent: read as p/100, and also accepted as the bare number p
    ("0.5", r"50\%"),
    ("0.5", "50%"),
    (r"50\%", "50"),
    ("12", r"12\%"),
    # units, currency, degrees and words around the number
    ("10", r"10\text{ cm}"),
    ("10", "10 cm"),
    ("12", "12 apples"),
    ("5", r"\$5"),
    ("90", r"90^\circ"),
    ("12", "The answer is 12"),
    # equations: the gold decides whether "x = 3" may stand for 3
    ("3", "x = 3"),
    ("x = 3", "3"),
    ("2x+1", "y=2x+1"),
    # sets and intervals
    (r"\{1,2\}", r"\{2,1\}"),
    ("1, 2", "2, 1"),  # a bare list is read as a set
    ("[1,2)", "[1,2)"),
    ("(1,2]", r"\left(1,2\right]"),
    (r"\infty", r"\infty"),
    # expressions are compared symbolically
    ("(x+1)^2", "x^2+2x+1"),
    ("x^2-1", "(x-1)(x+1)"),
    (r"\frac{1}{\sqrt{2}}", r"\sqrt{2}/2"),
    (r"2\sqrt{2}", r"\sqrt{8}"),
    # a multiple-choice letter
    (r"\text{(B)}", "B"),
]

NOT_EQUAL = [
    ("4", "3"),
    ("3", "-3"),
    (r"\frac{3}{4}", r"\frac{4}{3}"),
    ("1/3", "0.333"),  # wrong in the 4th decimal place
    (r"\pi", "3.14"),  # a symbolic answer is not its rounding
    (r"\pi", "3.14159"),  # 3.141590 vs 3.141593 at 6 places
    ("3", "3.001"),
    ("[1,2]", "(1,2)"),  # open and closed intervals differ
    ("(3,2)", "(2,3)"),  # an ordered pair is not an interval
    ("0.5", "50"),  # a bare 50 is not 50%
    ("x=2", "x=3"),
    ("A", "B"),
    ("42", "banana"),
    ("x^2+1", "x^2-1"),
]

SURPRISES = [
    # A space as a thousands separator: "1 000" is read as the product 1 * 000 = 0.
    ("1000", "1 000", False),
    # A unit that is not in math-verify's unit list stays: "5 dollars" is 5*d*o*l*l*a*r*s.
    ("5", "5 dollars", False),
    # "1e3" is read as 1 * e * 3 (e is Euler's number), not as scientific notation.
    ("1000", "1e3", False),
    # In LaTeX input the letter i is a symbol, not the imaginary unit: e^{i pi} stays symbolic.
    ("-1", r"e^{i\pi}", False),
    # Degrees are dropped, not converted to radians: 90 degrees is read as 90.
    (r"\frac{\pi}{2}", r"90^\circ", False),
    (r"\frac{\sqrt{3}}{2}", r"\sin(60^\circ)", False),  # so sin(60) in radians
    # Python syntax (**) is not LaTeX: the text is not parsed as an expression.
    ("1", "sin(x)**2+cos(x)**2", False),
    # An integer gold is compared exactly: rounding to 6 places keeps a float, and
    # sympy's Float(3.0000001).round(6) is not exactly Integer(3).
    ("3", "3.0000001", False),
]

TABLE = ([(r, a, True) for r, a in EQUAL] + [(r, a, False) for r, a in NOT_EQUAL]
         + [(r, a, verdict) for r, a, verdict in SURPRISES])


def test_the_table_has_at_least_forty_pairs_of_both_kinds() -> None:
    assert len(TABLE) >= 40
    assert sum(v for _, _, v in TABLE) >= 20 and sum(not v for _, _, v in TABLE) >= 20


@pytest.mark.parametrize(("reference", "answer", "verdict"), TABLE)
def test_verdict(reference: str, answer: str, verdict: bool) -> None:
    result = check_answer(answer, reference)
    assert result.equal is verdict
    assert result.readable and result.reference_readable and not result.timed_out


def test_other_threads_get_the_same_verdicts_through_the_worker() -> None:
    # The rollout manager steps envs in a thread pool, where signal.alarm is not allowed.
    with ThreadPoolExecutor(max_workers=4) as pool:
        verdicts = list(pool.map(lambda row: check_answer(row[1], row[0]).equal, TABLE))
    assert verdicts == [verdict for _, _, verdict in TABLE]


def test_check_answer_here_refuses_other_threads_and_says_why() -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            check_answer_here("1", "1")
        except ValueError as error:
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert len(errors) == 1 and "thread" in str(errors[0])


@pytest.mark.parametrize("answer", ["", "   ", "x" * (MAX_ANSWER_CHARS + 1), r"\frac{"])
def test_unreadable_answers_are_not_equal_and_say_so(answer: str) -> None:
    result = check_answer(answer, "1/2")
    assert not result.equal
    if answer.strip() == "" or len(answer) > MAX_ANSWER_CHARS:
        assert not result.readable


def test_an_unreadable_reference_is_reported_not_blamed_on_the_answer() -> None:
    result = check_answer("1", "")
    assert not result.equal and not result.reference_readable


@pytest.mark.parametrize("in_thread", [False, True])
def test_a_runaway_answer_is_cut_off_and_the_checker_keeps_working(in_thread: bool) -> None:
    # sympy would evaluate 9^(9^(9^9)) for ever; math-verify's alarm stops it.
    def check() -> tuple[bool, bool]:
        runaway = check_answer(r"9^{9^{9^{9}}}", "3", timeout=1)
        return runaway.equal, check_answer("3", "3").equal

    if in_thread:
        with ThreadPoolExecutor(max_workers=1) as pool:
            assert pool.submit(check).result(timeout=120) == (False, True)
    else:
        assert check() == (False, True)


def test_the_worker_is_restarted_after_it_dies() -> None:
    from agentgym.envs.math import verify

    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(check_answer, "1/2", "0.5").result(timeout=120).equal
        process = verify._WORKER._process
        assert process is not None
        process.kill()
        process.wait()
        assert pool.submit(check_answer, "1/2", "0.5").result(timeout=120).equal
        assert verify._WORKER._process is not process


def test_a_timeout_warning_is_not_printed_but_other_warnings_are(caplog: pytest.LogCaptureFixture) -> None:
    """A runaway answer is a wrong answer, not news: math-verify's timeout warning
    (which quotes the model's text) is dropped; its other warnings still show."""
    import logging

    check_answer_here("1", "1")  # a check installs the filter
    with caplog.at_level(logging.WARNING):
        logging.getLogger("math_verify.parser").warning("Timeout during parsing: 9^{9^{9^9}}")
        logging.getLogger("math_verify.grader").warning("Timeout during comparison")
        logging.getLogger("math_verify.grader").warning("something else went wrong")
    assert [record.getMessage() for record in caplog.records] == ["something else went wrong"]
