"""Word lists the knowledge-base generator draws names and phrasing from.

Given names are ordinary; surnames, cities, countries and organisation stems
are built from invented syllables, so no answer can be known without
searching. Edit with care: changing a list changes every generated world
(and so the cached indexes, which are keyed by the corpus text).
"""

from __future__ import annotations

__all__ = [
    "CITY_HEADS", "CITY_TAILS", "COUNTRY_HEADS", "COUNTRY_TAILS", "EVENT_KINDS", "FEMALE_NAMES",
    "MALE_NAMES", "MIDDLES", "OCCUPATIONS", "ORG_KINDS", "RIVERS", "SURNAME_HEADS",
    "SURNAME_TAILS", "TOPICS",
]

FEMALE_NAMES = (
    "Mira", "Alda", "Brisa", "Calla", "Delphine", "Edda", "Fenna", "Greta", "Hesper", "Ilse",
    "Jorun", "Katla", "Liesl", "Maren", "Nell", "Odile", "Petra", "Runa", "Signe", "Talia",
    "Una", "Vela", "Wren", "Ysolde", "Zora", "Anwen", "Beata", "Corin", "Dagny", "Elin",
    "Freya", "Gisla", "Hanne", "Isolde", "Jessamy", "Kirsi", "Linnea", "Marit", "Noor", "Orla",
    "Pia", "Quilla", "Rosalind", "Sabine", "Tove", "Ulla", "Verity", "Wilma", "Xanthe", "Yrsa",
)
MALE_NAMES = (
    "Arno", "Bastian", "Cedric", "Dorian", "Eamon", "Fabian", "Gideon", "Halvor", "Ivo", "Jasper",
    "Kasimir", "Leif", "Magnus", "Niels", "Osric", "Piet", "Quentin", "Rune", "Soren", "Tobias",
    "Ulric", "Vidar", "Wendel", "Xaver", "Yannick", "Zeno", "Anselm", "Bram", "Caspar", "Dag",
    "Emrys", "Florian", "Gunnar", "Henrik", "Ingmar", "Joost", "Kjell", "Lorcan", "Matthias",
    "Nico", "Oskar", "Pelle", "Ragnar", "Stellan", "Teodor", "Urban", "Valter", "Willem",
    "Yorick", "Zoltan",
)
SURNAME_HEADS = (
    "Tol", "Hal", "Brask", "Cor", "Dun", "Esk", "Fal", "Grim", "Hest", "Ing", "Jor", "Kest",
    "Lund", "Marr", "Nord", "Orm", "Pell", "Quar", "Rav", "Selk", "Tarn", "Ulv", "Vard", "Wess",
    "Yarl", "Zell", "Ash", "Bell", "Carr", "Dret", "Elm", "Fenn", "Gald", "Holt", "Isk", "Kell",
    "Lorr", "Mott", "Ness", "Orr", "Penn", "Rusk", "Stav", "Thorn", "Umb", "Vell", "Wynd",
    "Brenn", "Cask", "Drav",
)
SURNAME_TAILS = (
    "ven", "vard", "ling", "mark", "by", "stad", "wick", "ley", "rin", "sen", "holt", "dal",
    "quist", "berg", "mont", "ter", "ridge", "ham", "lowe", "more", "field", "strom", "ett",
    "ard", "ick", "is", "ander", "ow", "ington", "isk",
)
#: Put between a head and a tail when a big world runs short of two-part names.
MIDDLES = ("a", "e", "i", "o", "er", "an", "el", "in", "or", "un")
CITY_HEADS = (
    "Esker", "Brin", "Calder", "Dunmor", "Elder", "Fairn", "Gallow", "Harrow", "Ivel", "Kirren",
    "Lanth", "Merrow", "Norring", "Oster", "Penhal", "Quell", "Rosk", "Stren", "Tarrow",
    "Umber", "Vessel", "Wester", "Yarrow", "Zenn", "Aldrin", "Bracken", "Coldre", "Dray",
    "Ember", "Frost", "Glen", "Hollin", "Isen", "Junip", "Kettle", "Linden", "Mossel", "Nettle",
    "Oaken", "Pinner", "Raven", "Salter", "Thistle", "Vanter", "Willow",
)
CITY_TAILS = (
    "ford", "holm", "mere", "haven", "bridge", "port", "gate", "stead", "wick", "by", "thorpe",
    "minster", "cross", "fall", "moor", "burgh", "dale", "hithe",
)
COUNTRY_HEADS = (
    "Tess", "Vel", "Amor", "Bren", "Cald", "Dor", "Ester", "Fald", "Gor", "Hald", "Istr", "Kor",
    "Lom", "Mar", "Norv", "Ost", "Pell", "Quor", "Rhun", "Sard", "Thal", "Ulm", "Vor", "Zar",
)
COUNTRY_TAILS = ("aria", "ovia", "and", "ora", "ania", "mark", "esh", "ine", "avia", "ond")
RIVERS = (
    "Aln", "Brede", "Coln", "Dove", "Eske", "Frome", "Glass", "Hodder", "Isle", "Kennet",
    "Lune", "Mole", "Nene", "Ouse", "Perry", "Rye", "Swale", "Teme", "Ure", "Wey",
)
#: (the word in the organisation's name, what kind of organisation it is).
ORG_KINDS = (
    ("Institute", "research institute"), ("Trading Company", "trading company"),
    ("Society", "learned society"), ("Foundation", "charitable foundation"),
    ("Observatory", "observatory"), ("Conservatory", "music school"),
    ("Shipping Company", "shipping company"), ("Press", "publishing house"),
    ("Academy", "art academy"), ("Bank", "bank"), ("Museum", "museum"),
    ("Orchestra", "orchestra"), ("Library", "public library"), ("Brewery", "brewery"),
    ("Ironworks", "ironworks"), ("Seed Company", "seed company"),
)
OCCUPATIONS = (
    "botanist", "engineer", "cartographer", "composer", "painter", "physician", "astronomer",
    "merchant", "architect", "chemist", "novelist", "shipbuilder", "geologist", "poet",
    "lawyer", "banker", "sculptor", "printer", "brewer", "mathematician",
)
TOPICS = (
    "mosses", "bridges", "tides", "old maps", "folk songs", "clockwork", "comets", "glass",
    "bookbinding", "orchards", "lighthouses", "dyes", "river trade", "weather", "bees",
)
EVENT_KINDS = ("Exhibition", "Congress", "Regatta", "Fair", "Festival", "Conference")
