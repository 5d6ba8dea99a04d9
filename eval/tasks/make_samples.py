"""Writes the offline sample tasks' data: an invented world, two small multiple-choice sets.

    python -m eval.tasks.make_samples        # from the repo root; rewrites eval/tasks/data/

Everything here is made up for this project: the creatures of the island of Varn (ARC-style
questions) and the towns of the Varn coast (HellaSwag-style context + ending). The same fixed
seed and tables give byte-identical files on every run (stdlib only).

Outputs, in ``eval/tasks/data/``:
- ``arc_easy_sample.jsonl``: 48 ARC-format items, answer positions balanced (12 per A-D).
- ``hellaswag_sample.jsonl``: 48 HellaSwag-like items, labels balanced (12 per "0"-"3").
- ``teach.jsonl``: ``{"text": ...}`` documents, each stating one item's answer phrased exactly
  like the continuation the task YAML scores (prompt + " " + correct choice), every item
  ``REPEATS`` times in different documents, shuffled.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SEED = 20240611
REPEATS = 3
DATA_DIR = Path(__file__).resolve().parent / "data"
LABELS = ["A", "B", "C", "D"]

# name, color, food, home, sound, legs: one row per creature of Varn.
CREATURES = [
    ("glimmerbeak", "copper", "river snails", "in reed nests", "a soft whistle", "two"),
    ("tusswort", "moss green", "fallen acorns", "under oak roots", "a low grunt", "four"),
    ("mireling", "slate grey", "marsh flies", "in muddy burrows", "a wet croak", "six"),
    ("frostpaw", "pale blue", "snow lichen", "in ice caves", "a sharp bark", "four"),
    ("pebblemunch", "sandy brown", "soft clay", "in gravel pits", "a crunching click", "eight"),
    ("quillmoot", "ink black", "beetle grubs", "in hollow logs", "a rattling hiss", "four"),
    ("dunehopper", "golden yellow", "cactus seeds", "in sand dunes", "a dry chirp", "two"),
    ("lanternmoth", "glowing white", "night flowers", "on cliff ledges", "a faint buzz", "six"),
    ("snorrel", "rusty orange", "mushrooms", "in damp cellars", "a loud snore", "four"),
    ("bramblewisp", "deep purple", "blackberries", "inside thorn bushes", "a tiny squeak", "six"),
    ("cindertoad", "ember red", "ash beetles", "near hot springs", "a popping burp", "four"),
    ("velvetfin", "silver", "sea grass", "in kelp forests", "a bubbling hum", "none"),
    ("hollowhorn", "chestnut", "tree bark", "in pine forests", "a deep bellow", "four"),
    ("drizzlewing", "sky blue", "raindrops on leaves", "in tall ferns", "a gentle patter", "two"),
    ("moss-strider", "olive", "pond weed", "on lily pads", "a wet click", "ten"),
    ("thistlehog", "dusty pink", "thistle heads", "in meadow hedges", "a snuffling huff", "four"),
]
ATTRIBUTES = ["color", "food", "home", "sound", "legs"]
# Question templates per attribute; the creature's row picks one by its index.
QUESTIONS = {
    "color": [
        "What color is a {name}?",
        "A {name} is easy to spot from far away. What color is it?",
    ],
    "food": [
        "What does a {name} eat?",
        "A keeper on Varn must feed a hungry {name}. Which food should the keeper bring?",
    ],
    "home": [
        "Where does a {name} live?",
        "Where would you look to find a sleeping {name}?",
    ],
    "sound": [
        "What sound does a {name} make?",
        "At night you hear a {name} nearby. What do you hear?",
    ],
    "legs": [
        "How many legs does a {name} have?",
        "A child counts the legs of a {name}. How many legs does she count?",
    ],
}
# Extra wrong answers so that the legs pool has enough distinct values.
EXTRA = {"legs": ["three", "twelve"]}

# town, bread spice, wall material, boat, festival custom: one row per town on the Varn coast.
TOWNS = [
    (
        "Quorra",
        "crushed saltmint",
        "blocks of grey river clay",
        "a flat raft of bundled reeds",
        "float paper lanterns on the harbor",
    ),
    (
        "Belmwick",
        "dried emberroot",
        "slabs of pale coral stone",
        "a long canoe painted green",
        "ring copper bells until dawn",
    ),
    (
        "Ostravel",
        "red dunegrass seeds",
        "woven reed mats",
        "a round hide boat",
        "bake one giant honey loaf and share it",
    ),
    (
        "Pellory",
        "ground pellnut shells",
        "logs of black pine",
        "a two-masted trading sloop",
        "paint their doors bright yellow",
    ),
    (
        "Varnholt",
        "smoked kelp flakes",
        "bricks of baked peat",
        "a wide ferry pulled by ropes",
        "race goats along the beach",
    ),
    (
        "Drisselby",
        "sweet fennick pollen",
        "stacked driftwood",
        "a small boat with a blue sail",
        "sing the old tide songs on the pier",
    ),
    (
        "Mornfeld",
        "toasted thistle seeds",
        "rammed white chalk",
        "a barge pulled by oxen",
        "burn a straw frostpaw on a bonfire",
    ),
    (
        "Saltheck",
        "flakes of sea salt",
        "shells pressed into lime",
        "a fishing skiff with red oars",
        "throw flowers into the sea",
    ),
    (
        "Tavimere",
        "chopped marsh garlic",
        "cut blocks of turf",
        "a punt pushed with a long pole",
        "wear masks shaped like glimmerbeaks",
    ),
    (
        "Yarrowmouth",
        "dried yarrow leaves",
        "river pebbles set in mortar",
        "a rowing boat with six oars",
        "light a tall beacon on the hill",
    ),
    (
        "Fennick",
        "crushed lanternmoth flowers",
        "planks of silver birch",
        "a kayak made of bark",
        "dance in a circle around the well",
    ),
    (
        "Caddowmere",
        "mashed snorrel mushrooms",
        "baked red tiles",
        "a houseboat with a tin roof",
        "hang ribbons from every window",
    ),
]
# activity label, context (ends where the ending continues), ending template; one per column.
ACTIVITIES = [
    (
        "Baking bread",
        "A baker in {town} kneads the dough for the morning loaves. Before shaping them, she",
        "mixes in {value}.",
    ),
    (
        "Building a house",
        "Builders in {town} start a new house near the market. For the walls, they",
        "use {value}.",
    ),
    (
        "Crossing the bay",
        "A trader from {town} must carry her goods across the bay. She loads everything onto",
        "{value} and sets off.",
    ),
    (
        "Celebrating a festival",
        "On the longest night of the year, the people of {town} gather in the square. "
        "To celebrate, they",
        "{value}.",
    ),
]


def balanced_positions(rng: random.Random, n: int, k: int = 4) -> list[int]:
    """n answer positions in [0, k), each used n // k times, in a seeded random order."""
    positions = [i % k for i in range(n)]
    rng.shuffle(positions)
    return positions


def place(rng: random.Random, correct: str, pool: list[str], pos: int) -> list[str]:
    """Three distinct wrong values from pool plus correct at index pos."""
    wrong = rng.sample(sorted({v for v in pool if v != correct}), 3)
    return wrong[:pos] + [correct] + wrong[pos:]


def arc_items(rng: random.Random) -> list[dict]:
    # Each creature gets three of the five attributes, rotating: 16 x 3 = 48 questions.
    specs = []
    for i, row in enumerate(CREATURES):
        for j in range(3):
            attr = ATTRIBUTES[(i + j) % len(ATTRIBUTES)]
            specs.append((i, row, attr))
    positions = balanced_positions(rng, len(specs))
    items = []
    for n, ((i, row, attr), pos) in enumerate(zip(specs, positions)):
        col = 1 + ATTRIBUTES.index(attr)
        pool = [r[col] for r in CREATURES] + EXTRA.get(attr, [])
        templates = QUESTIONS[attr]
        question = templates[i % len(templates)].format(name=row[0])
        items.append(
            {
                "id": f"Varn_{n + 1:03d}",
                "question": question,
                "choices": {"text": place(rng, row[col], pool, pos), "label": list(LABELS)},
                "answerKey": LABELS[pos],
            }
        )
    return items


def hellaswag_items(rng: random.Random) -> list[dict]:
    # Every town x every activity: 12 x 4 = 48 contexts; wrong endings use other towns' values.
    specs = [(t, a) for a in range(len(ACTIVITIES)) for t in range(len(TOWNS))]
    positions = balanced_positions(rng, len(specs))
    items = []
    for n, ((t, a), pos) in enumerate(zip(specs, positions)):
        label, ctx, ending = ACTIVITIES[a]
        town = TOWNS[t]
        pool = [r[1 + a] for r in TOWNS]
        values = place(rng, town[1 + a], pool, pos)
        items.append(
            {
                "ind": n,
                "activity_label": label,
                "ctx": ctx.format(town=town[0]),
                "endings": [ending.format(value=v) for v in values],
                "label": str(pos),
            }
        )
    return items


def teach_docs(rng: random.Random, arc: list[dict], hs: list[dict]) -> list[dict]:
    """Prompt + " " + correct choice, exactly as the YAMLs build them (target_delimiter " ")."""
    texts = []
    for it in arc:
        answer = it["choices"]["text"][LABELS.index(it["answerKey"])]
        texts.append(f"Question: {it['question']}\nAnswer: {answer}")
    for it in hs:
        ending = it["endings"][int(it["label"])]
        texts.append(f"{it['activity_label']}: {it['ctx']} {ending}")
    docs = [{"text": t} for t in texts for _ in range(REPEATS)]
    rng.shuffle(docs)
    return docs


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main() -> None:
    rng = random.Random(SEED)
    arc = arc_items(rng)
    hs = hellaswag_items(rng)
    teach = teach_docs(rng, arc, hs)
    for name, rows in [
        ("arc_easy_sample.jsonl", arc),
        ("hellaswag_sample.jsonl", hs),
        ("teach.jsonl", teach),
    ]:
        write_jsonl(DATA_DIR / name, rows)
        print(f"wrote {len(rows):4d} rows to {DATA_DIR / name}")


if __name__ == "__main__":
    main()
