"""The shop's products, the shopper's goal, and how well a purchase meets it (WebShop's reward).

:func:`generate_task` draws, from a NumPy generator, a catalogue of products
(a type such as "t-shirt", a brand, a material, features, purchasable options
such as colour and size, a price) and a goal built from one of them: "I need a
t-shirt that is cotton and machine washable, in red, in size M, for at most
$30.00". Next to the goal's product it places near misses (another
material, a feature missing, the price over the limit, the colour not
offered), so that reading the product pages matters.

:func:`score_purchase` is WebShop's reward (Yao et al., 2022)::

    reward = r_type * (matched attributes + matched options + [price <= limit])
                    / (goal attributes    + goal options    + 1)

with ``r_type`` 1 for the right product type, 0.5 for another type of the
same category, 0.1 otherwise. Unlike WebShop, attributes and options are
matched exactly (the catalogue is structured), not by fuzzy text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

__all__ = [
    "BRANDS",
    "COLOURS",
    "PRODUCT_TYPES",
    "Catalog",
    "Goal",
    "Product",
    "ProductType",
    "Score",
    "generate_task",
    "score_purchase",
    "tokens",
]

COLOURS = ("red", "blue", "navy", "black", "white", "grey", "green", "yellow", "pink",
           "purple", "beige", "brown", "orange")
BRANDS = ("Northwind", "Bluepeak", "Kestrel", "Alder & Co", "Marlow", "Tideline", "Fernhill",
          "Oakridge", "Solace", "Vantage", "Brightwater", "Ember", "Larkspur", "Quill",
          "Redfern", "Halcyon", "Juniper", "Copperleaf")
_SIZES = ("XS", "S", "M", "L", "XL", "XXL")


@dataclass(frozen=True, slots=True)
class ProductType:
    """A kind of product: what it can be made of, its possible features and options."""

    name: str
    category: str
    materials: tuple[str, ...]
    features: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price_range: tuple[int, int]  # whole dollars


PRODUCT_TYPES: tuple[ProductType, ...] = (
    ProductType("t-shirt", "clothing", ("cotton", "linen", "polyester", "bamboo"),
                ("machine washable", "short sleeve", "long sleeve", "slim fit", "relaxed fit",
                 "organic"), (("colour", COLOURS), ("size", _SIZES)), (8, 45)),
    ProductType("hoodie", "clothing", ("cotton", "fleece", "polyester", "wool"),
                ("zip up", "pullover", "machine washable", "water resistant", "lined"),
                (("colour", COLOURS), ("size", _SIZES)), (20, 90)),
    ProductType("jeans", "clothing", ("denim", "stretch denim", "organic cotton"),
                ("slim fit", "straight leg", "high waist", "relaxed fit", "button fly"),
                (("colour", ("blue", "black", "grey", "white")),
                 ("size", ("28", "30", "32", "34", "36"))), (25, 120)),
    ProductType("running shoes", "footwear", ("mesh", "knit", "synthetic"),
                ("lightweight", "breathable", "waterproof", "non slip", "cushioned"),
                (("colour", COLOURS), ("size", ("6", "7", "8", "9", "10", "11", "12"))), (35, 160)),
    ProductType("boots", "footwear", ("leather", "suede", "rubber"),
                ("waterproof", "insulated", "slip resistant", "ankle height"),
                (("colour", ("black", "brown", "beige", "grey")),
                 ("size", ("6", "7", "8", "9", "10", "11", "12"))), (45, 220)),
    ProductType("coffee mug", "kitchen", ("ceramic", "glass", "stainless steel", "porcelain"),
                ("dishwasher safe", "microwave safe", "insulated", "lidded"),
                (("colour", COLOURS), ("capacity", ("8 oz", "12 oz", "16 oz", "20 oz"))), (6, 40)),
    ProductType("backpack", "bags", ("nylon", "canvas", "leather", "polyester"),
                ("water resistant", "padded", "lightweight", "anti theft"),
                (("colour", COLOURS), ("capacity", ("15 l", "20 l", "25 l", "30 l"))), (20, 150)),
    ProductType("headphones", "electronics", ("plastic", "aluminium"),
                ("wireless", "noise cancelling", "over ear", "foldable"),
                (("colour", ("black", "white", "silver", "blue", "red")),), (20, 300)),
    ProductType("phone case", "electronics", ("silicone", "leather", "polycarbonate"),
                ("shockproof", "slim", "magnetic", "clear"),
                (("colour", COLOURS), ("model", ("phone 13", "phone 14", "phone 15"))), (8, 50)),
    ProductType("pillow", "bedding", ("cotton", "memory foam", "down", "bamboo"),
                ("hypoallergenic", "machine washable", "cooling", "firm"),
                (("size", ("standard", "queen", "king")),), (15, 90)),
)
_TYPES = {kind.name: kind for kind in PRODUCT_TYPES}
_WORD = re.compile(r"[a-z0-9]+")


def tokens(text: str) -> set[str]:
    """Lower-case words and numbers of ``text`` (what search matches on)."""
    return set(_WORD.findall(text.lower()))


@dataclass(frozen=True, slots=True)
class Product:
    """One product of the catalogue. ``price`` is in cents."""

    id: int
    type: str
    brand: str
    material: str
    features: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price: int
    rating: float

    @property
    def category(self) -> str:
        return _TYPES[self.type].category

    @property
    def attributes(self) -> frozenset[str]:
        """Material and features: what a goal's attributes are matched against."""
        return frozenset((self.material, *self.features))

    @property
    def title(self) -> str:
        lead = f"{self.features[0].title()} " if self.features else ""
        return f"{self.brand} {lead}{self.material.title()} {self.type.title()}"

    def offers(self, name: str, value: str) -> bool:
        return any(option == name and value in values for option, values in self.options)

    def search_text(self) -> str:
        values = " ".join(" ".join(values) for _, values in self.options)
        return f"{self.title} {self.type} {self.category} {' '.join(self.features)} {values}"


@dataclass(frozen=True, slots=True)
class Goal:
    """What the shopper wants; ``target`` is the product the goal was drawn from."""

    type: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, str], ...]
    max_price: int  # cents
    text: str
    target: int

    @property
    def query(self) -> str:
        """Words a sensible shopper would search for."""
        values = " ".join(value for _, value in self.options)
        return f"{' '.join(self.attributes)} {self.type} {values}"


@dataclass(frozen=True, slots=True)
class Score:
    """The parts of WebShop's reward for one purchased item."""

    type_factor: float
    attributes: int
    options: int
    price: bool
    total: float


class Catalog:
    """Products by id, with a keyword search."""

    def __init__(self, products: list[Product]) -> None:
        self.products = products
        self._tokens = [tokens(product.search_text()) for product in products]

    def get(self, product_id: int) -> Product | None:
        return self.products[product_id] if 0 <= product_id < len(self.products) else None

    def search(self, query: str) -> list[Product]:
        """Products sharing words with ``query``, most shared first (ties by id); all if empty."""
        words = tokens(query)
        if not words:
            return list(self.products)
        scored = [(len(words & known), product.id)
                  for product, known in zip(self.products, self._tokens, strict=True)]
        ranked = sorted((item for item in scored if item[0] > 0), key=lambda item: (-item[0], item[1]))
        return [self.products[product_id] for _, product_id in ranked]


class _Draws:
    """Uniform numbers from the generator, drawn in blocks and handed out one at a time.

    A catalogue needs thousands of small random choices; one numpy call each
    costs microseconds of overhead, so they come from one call per block.
    """

    def __init__(self, rng: np.random.Generator, block: int = 4096) -> None:
        self._rng = rng
        self._block = block
        self._values: list[float] = []
        self._next = 0

    def uniform(self) -> float:
        if self._next == len(self._values):
            self._values, self._next = self._rng.random(self._block).tolist(), 0
        value = self._values[self._next]
        self._next += 1
        return value

    def below(self, n: int) -> int:
        """An integer in ``[0, n)``."""
        return min(int(self.uniform() * n), n - 1)

    def choice(self, items: tuple[str, ...]) -> str:
        return items[self.below(len(items))]

    def sample(self, items: tuple[str, ...], count: int) -> tuple[str, ...]:
        """``count`` distinct items, kept in their original order."""
        order = list(range(len(items)))
        count = min(count, len(items))
        for i in range(count):  # the first steps of a Fisher-Yates shuffle
            j = i + self.below(len(order) - i)
            order[i], order[j] = order[j], order[i]
        return tuple(items[i] for i in sorted(order[:count]))


def _pick(rng: np.random.Generator, items: tuple[str, ...], count: int) -> tuple[str, ...]:
    chosen = rng.choice(len(items), size=min(count, len(items)), replace=False)
    return tuple(items[int(i)] for i in sorted(chosen))


def _random_product(draws: _Draws, kind: ProductType) -> Product:
    options = tuple((name, draws.sample(values, 2 + draws.below(len(values) - 1)))
                    for name, values in kind.options)
    low, high = kind.price_range
    price = (low + draws.below(high - low + 1)) * 100 + (99, 49, 95, 0)[draws.below(4)]
    return Product(
        id=-1, type=kind.name, brand=draws.choice(BRANDS), material=draws.choice(kind.materials),
        features=draws.sample(kind.features, 1 + draws.below(3)), options=options, price=price,
        rating=round(2.5 + 2.5 * draws.uniform(), 1),
    )


def _goal_for(rng: np.random.Generator, product: Product) -> Goal:
    count = 2 if len(product.features) > 1 and rng.random() < 0.5 else 1
    attributes = ((product.material,) if rng.random() < 0.7 else ()) + _pick(rng, product.features, count)
    options = tuple((name, str(rng.choice(values))) for name, values in product.options)
    # A round budget a little above the price: $5 steps under $50, $10 above.
    step = 500 if product.price < 5000 else 1000
    budget = product.price * float(rng.uniform(1.05, 1.5))
    max_price = int(-(-budget // step) * step)
    return Goal(product.type, attributes, options, max_price, _goal_text(rng, product.type,
                attributes, options, max_price), target=-1)


_OPTION_PHRASES = {"colour": "in {}", "size": "in size {}", "capacity": "with a capacity of {}",
                   "model": "that fits the {}"}
_TEMPLATES = (
    "I need {a} {type} that is {attributes}, {options}, for at most {price}.",
    "Find me {a} {attributes_adj} {type} {options}; my budget is {price}.",
    "I am looking for {a} {type} that is {attributes}, {options}, and costs no more than {price}.",
)


def _goal_text(rng: np.random.Generator, kind: str, attributes: tuple[str, ...],
               options: tuple[tuple[str, str], ...], max_price: int) -> str:
    template = _TEMPLATES[int(rng.integers(len(_TEMPLATES)))]
    return template.format(
        a="an" if kind[0] in "aeiou" else "a", type=kind,
        attributes=" and ".join(attributes), attributes_adj=" ".join(attributes),
        options=", ".join(_OPTION_PHRASES[name].format(value) for name, value in options),
        price=f"${max_price / 100:.2f}",
    )


def _near_misses(rng: np.random.Generator, product: Product, goal: Goal) -> list[Product]:
    """Products that look right in a list of results but miss one part of the goal."""
    kind = _TYPES[product.type]
    misses = []
    other_materials = [m for m in kind.materials if m != product.material]
    if product.material in goal.attributes and other_materials:
        misses.append(replace(product, material=str(rng.choice(other_materials))))
    features = [f for f in goal.attributes if f in product.features]
    if features:
        dropped = tuple(f for f in product.features if f != features[0])
        misses.append(replace(product, features=dropped))
    over = int(goal.max_price * float(rng.uniform(1.1, 1.5))) // 100 * 100 + 99
    misses.append(replace(product, price=over))
    name, value = goal.options[0]
    without = tuple((n, tuple(v for v in values if v != value) if n == name else values)
                    for n, values in product.options)
    if all(values for _, values in without):
        misses.append(replace(product, options=without))
    return misses


def generate_task(rng: np.random.Generator, num_products: int) -> tuple[Catalog, Goal]:
    """A catalogue of ``num_products`` products (near misses included) and a goal it can meet."""
    draws = _Draws(rng)
    products = [_random_product(draws, PRODUCT_TYPES[draws.below(len(PRODUCT_TYPES))])
                for _ in range(num_products)]
    target = products[0]
    goal = _goal_for(rng, target)
    misses = [replace(miss, brand=str(rng.choice(BRANDS))) for miss in _near_misses(rng, target, goal)]
    pool = products[: max(num_products - len(misses), 1)] + misses  # the target is products[0]
    order = rng.permutation(len(pool))
    numbered = [replace(pool[int(i)], id=position) for position, i in enumerate(order)]
    target_id = int(np.flatnonzero(order == 0)[0])
    return Catalog(numbered), replace(goal, target=target_id)


def score_purchase(goal: Goal, product: Product, chosen: dict[str, str]) -> Score:
    """WebShop's reward for buying ``product`` with options ``chosen`` (see the module docstring)."""
    if product.type == goal.type:
        type_factor = 1.0
    elif product.category == _TYPES[goal.type].category:
        type_factor = 0.5
    else:
        type_factor = 0.1
    attributes = sum(1 for attribute in goal.attributes if attribute in product.attributes)
    options = sum(1 for name, value in goal.options if chosen.get(name) == value)
    price = product.price <= goal.max_price
    total = type_factor * (attributes + options + int(price)) / (len(goal.attributes) + len(goal.options) + 1)
    return Score(type_factor, attributes, options, price, total)
