"""Write the shipped preference set (train.jsonl, test.jsonl beside this file).

    .venv/bin/python -m zoo.assets.preferences.make_preferences

Made from the shipped instruction set (zoo/assets/instructions/*.jsonl): each of its
chat rows becomes a TRL preference row with an explicit prompt,

    {"prompt": [system?, user], "chosen": [{"role": "assistant", "content": the answer}],
     "rejected": [{"role": "assistant", "content": a worse one}]}

where the worse answer alternates row by row between a refusal (one of a few fixed
phrasings) and the answer of another, randomly drawn row of the other answer type (a number
for a word question, a word for a number question), so it is plainly wrong. A tiny model
learns both signals within a few hundred DPO steps: what a refusal looks like, and which kind
of answer a question asks for. train.jsonl takes the first TRAIN_ROWS instruction train rows
(the file stays well under 1 MB), test.jsonl every instruction test row. Standard library
only, fixed seed: reruns are byte-identical.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
INSTRUCTIONS = HERE.parent / "instructions"
SEED = 2024
TRAIN_ROWS = 2000

REFUSALS = (
    "I don't know.",
    "I cannot answer that.",
    "Sorry, I can't help with that.",
    "I am not sure.",
)


def read_chats(name: str) -> list[list[dict]]:
    """The instruction split's conversations, each ending in its assistant answer."""
    text = (INSTRUCTIONS / name).read_text(encoding="utf-8")
    return [json.loads(line)["messages"] for line in text.splitlines()]


def is_number(answer: str) -> bool:
    return answer.isdigit()


def preferences(chats: list[list[dict]], rng: random.Random) -> list[dict]:
    """One preference row a conversation; even rows are refused, odd rows get another row's
    answer of the other type."""
    answers = [chat[-1]["content"] for chat in chats]
    by_type = {kind: [a for a in answers if is_number(a) == kind] for kind in (False, True)}
    rows = []
    for index, (chat, answer) in enumerate(zip(chats, answers)):
        if index % 2 == 0:
            worse = rng.choice(REFUSALS)
        else:
            worse = rng.choice(by_type[not is_number(answer)])
        rows.append({"prompt": chat[:-1],
                     "chosen": [{"role": "assistant", "content": answer}],
                     "rejected": [{"role": "assistant", "content": worse}]})
    return rows


def render(seed: int = SEED) -> dict[str, str]:
    """{file name: text} of the two splits; a pure function of the seed and the instructions."""
    rng = random.Random(seed)
    splits = {"train.jsonl": read_chats("train.jsonl")[:TRAIN_ROWS],
              "test.jsonl": read_chats("test.jsonl")}
    return {name: "".join(json.dumps(row) + "\n" for row in preferences(chats, rng))
            for name, chats in splits.items()}


def main(folder: Path = HERE) -> None:
    for name, text in render().items():
        (folder / name).write_text(text, encoding="utf-8", newline="\n")
        print(f"wrote {folder / name} ({text.count(chr(10))} rows)")


if __name__ == "__main__":
    main()
