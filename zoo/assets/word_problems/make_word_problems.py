"""Write the shipped GSM8K-style word problems (problems.jsonl beside this file).

    .venv/bin/python -m zoo.assets.word_problems.make_word_problems

Rows `{"prompt": question, "answer": worked steps ending "#### N", "kind": template}`, as
GSM8K writes its answers, for GRPO's `final_number` reward (zoo/data/rewards.py). Six
templates of one or two arithmetic steps over small whole numbers; one writes thousands with
commas (12,500) as word problems do. Invented for this project; standard library only,
fixed seed: reruns are byte-identical.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 1129
COUNT = 40
NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivo", "Jun", "Kofi",
         "Lena", "Milo", "Nia", "Omar", "Pia"]
ITEMS = ["apples", "marbles", "stickers", "pencils", "cards", "shells", "beads", "stamps"]


def packs(rng: random.Random, name: str) -> tuple[str, str, int]:
    item, have, bought, size = rng.choice(ITEMS), rng.randint(3, 30), rng.randint(2, 6), \
        rng.randint(3, 12)
    total = have + bought * size
    return (f"{name} has {have} {item}. {name} buys {bought} packs of {size} {item} each. "
            f"How many {item} does {name} have now?",
            f"The packs hold {bought} * {size} = {bought * size} {item}.\n"
            f"{name} has {have} + {bought * size} = {total} {item}.", total)


def change(rng: random.Random, name: str) -> tuple[str, str, int]:
    price, count = rng.randint(2, 9), rng.randint(2, 5)
    paid = 10 * (price * count // 10 + 1 + rng.randint(0, 2))
    cost = price * count
    return (f"A shop sells notebooks for ${price} each. {name} buys {count} notebooks and "
            f"pays with ${paid}. How many dollars of change does {name} get?",
            f"The notebooks cost {count} * {price} = {cost} dollars.\n"
            f"The change is {paid} - {cost} = {paid - cost} dollars.", paid - cost)


def pages(rng: random.Random, name: str) -> tuple[str, str, int]:
    daily, days, last = rng.randint(5, 25), rng.randint(3, 9), rng.randint(1, 30)
    return (f"{name} reads {daily} pages a day for {days} days, then {last} pages on the "
            f"next day. How many pages does {name} read in all?",
            f"In {days} days {name} reads {days} * {daily} = {days * daily} pages.\n"
            f"In all {days * daily} + {last} = {days * daily + last} pages.",
            days * daily + last)


def orchard(rng: random.Random, name: str) -> tuple[str, str, int]:
    rows, per_row = rng.randint(3, 12), rng.randint(4, 15)
    cut = rng.randint(1, rows * per_row - 1)
    return (f"{name}'s orchard has {rows} rows of {per_row} trees. {cut} trees are cut down. "
            "How many trees are left?",
            f"There were {rows} * {per_row} = {rows * per_row} trees.\n"
            f"{rows * per_row} - {cut} = {rows * per_row - cut} trees are left.",
            rows * per_row - cut)


def deposit(rng: random.Random, name: str) -> tuple[str, str, int]:
    price, share = 100 * rng.randint(60, 400), rng.choice([10, 20, 25, 40, 50])
    paid = price * share // 100
    return (f"A car costs ${price:,}. {name} pays {share}% of the price up front. How many "
            "dollars does that come to?",
            f"{share}% of {price:,} is {price:,} * {share} / 100 = {paid:,} dollars.", paid)


def shares(rng: random.Random, name: str) -> tuple[str, str, int]:
    item, friends, each = rng.choice(ITEMS), rng.randint(2, 8), rng.randint(3, 14)
    return (f"{name} shares {friends * each} {item} equally among {friends} friends. How "
            f"many {item} does each friend get?",
            f"Each friend gets {friends * each} / {friends} = {each} {item}.", each)


KINDS = {"packs": packs, "change": change, "pages": pages, "orchard": orchard,
         "deposit": deposit, "shares": shares}


def problems() -> list[dict]:
    rng = random.Random(SEED)
    kinds = list(KINDS)
    rows = []
    for i in range(COUNT):
        kind = kinds[i % len(kinds)]
        question, steps, result = KINDS[kind](rng, rng.choice(NAMES))
        rows.append({"prompt": question, "answer": f"{steps}\n#### {result}", "kind": kind})
    return rows


def main() -> None:
    text = "".join(json.dumps(row) + "\n" for row in problems())
    (HERE / "problems.jsonl").write_text(text, encoding="utf-8", newline="\n")


if __name__ == "__main__":
    main()
