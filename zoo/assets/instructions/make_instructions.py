"""Write the shipped instruction set (train.jsonl, test.jsonl, grpo.jsonl beside this file).

    .venv/bin/python -m zoo.assets.instructions.make_instructions

Chat rows `{"messages": [{"role": ..., "content": ...}, ...]}` of three rules a tiny model
learns in a few hundred steps, each answer 1-3 tokens of the shipped tokenizer:

- repeat: 'Repeat the word "cat".' -> 'cat' (a copy);
- first/last: 'What is the last word in "cat", "sun", "map"?' -> 'map' (a copy chosen by
  position);
- after/before: 'What number comes after 47?' -> '48' (copy the tens digit, step the units
  digit: no carry, and no number the tokenizer keeps as one token, so every number is two
  digit tokens).

Words are quoted so that the word is tokenized as it is in the answer, which starts a line
(no leading space). The test split holds new instances of the same rules: words never asked
to be repeated in train (they appear there in lists), number facts never asked in train in
any phrasing, word lists never seen in train; no test question is a train question. Test
rows also carry "question", "answer" and "kind" for lm-eval (eval/tasks/zoo_instructions.yaml)
and have no system turn, so the chat the eval renders is the row's own; a quarter of the
train rows have one.

grpo.jsonl holds prompts for task=grpo that only the rules answer, so a reward for a right
answer pays for the rule and not for recall of SFT answers: word lists in neither split, and
repeat questions of words in neither split (NEW_WORDS). Number facts are left out: every
two-digit fact the rule allows is already in train or test. Its rows are test-shaped (chat,
"question", "answer", "kind"). It is drawn from its own random stream, after the two splits,
so adding it changed neither. Standard library only, fixed seeds: reruns are byte-identical.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 1126

# simple nouns of 1-3 tokens each in core/assets/tokenizer (without a leading space)
WORDS = """
apple bread chair dog door egg fish frog glass green hand hat horse house king lamp leaf
lion milk moon mouse nose orange paper pen pig rain red ring river road rock rose salt
sand ship shoe snow star stone sun table tree wall water wind window wolf wood bird boat
book box cake car cat coat corn cow cup desk duck farm fire flag flower fox garden gold
grape hill ice jar key kite lake lemon map nest nut owl pear pie plum queen rabbit rope
seed silk sock spoon tiger toy train truck vase whale bell bean bear bee blue brick button
camel candle cheese clock coin crab drum fan feather fork gate goat hammer honey juice
ladder leg mango mask melon mirror nail needle ocean onion panda pearl pepper piano pillow
plant pot pump rice robot roof sail saw scarf shell silver sofa soup spider sugar swan
tent tomato towel violin wagon wire yarn zebra apron badge cabin canoe cliff comet cotton
engine forest ghost glove harp island lily magnet marble meadow nectar olive oyster parrot
pebble penguin pirate quilt saddle tablet thunder turtle valley willow
""".split()

# the GRPO split's repeat words: in neither split, and 1-3 tokens each as WORDS are
NEW_WORDS = """
ant arm axe bag ball band bank barn bat bath beach bed belt bench berry bike blade bone
boot bowl brain broom bug bus bush cage calf camera cap card cart chain chalk cherry chest
chick chin church clown coach comb cook cookie couch cousin cube curtain deer dish doll
donkey dress ear earth face fairy fence field finger flute fog foot frame gift girl goose
grass guitar hair hall heart hen hook horn hose jeans kitten knee knot lace lamb leash
letter lizard lock log lung maple meal medal mitten monkey moth motor mountain mud mug nap
neck net night noodle oak oar orbit oven pad paint palm pan pants parcel park pasta path
peach peanut pencil pet phone picture pipe planet plate pond pony purse radio raft rat rug
ruler sack salad scale school screen sea shelf shirt shop shovel sink sky sled slide soap
sponge spring square stamp stick stool storm straw street string sweater swing tail taxi
tea teeth thread throne thumb ticket toast toe tooth torch tower town toad tray trumpet
tub van vest vine wand wave web whistle wing winter worm yacht yard
""".split()

# two-digit numbers the shipped tokenizer keeps as one token: as an answer (line start) and
# after a space (in a question); facts touching them are left out
WHOLE_ANSWER = {10, 11, 12, 13, 14, 15, 20, 24, 26, 30, 34, 36, 37, 42, 43, 48, 81, 84, 92}
WHOLE_QUESTION = {10, 11, 16, 25, 32, 42, 56}

REPEAT = (
    'Repeat the word "{w}".',
    'Say the word "{w}" again.',
    'Copy this word: "{w}"',
    'Write "{w}" once.',
    'Echo the word "{w}".',
    'Please repeat "{w}".',
)
FIRST = (
    'What is the first word in "{a}", "{b}", "{c}"?',
    'Which word comes first: "{a}", "{b}", "{c}"?',
    'Name the first word of "{a}", "{b}", "{c}".',
)
LAST = (
    'What is the last word in "{a}", "{b}", "{c}"?',
    'Which word comes last: "{a}", "{b}", "{c}"?',
    'Name the last word of "{a}", "{b}", "{c}".',
)
AFTER = (
    "What number comes after {n}?",
    "What is the next number after {n}?",
    "Which number is one more than {n}?",
    "What is {n} plus one?",
)
BEFORE = (
    "What number comes before {n}?",
    "What is the number just before {n}?",
    "Which number is one less than {n}?",
    "What is {n} minus one?",
)
SYSTEMS = (
    "Answer with one word.",
    "You are a helpful assistant. Reply with the answer only.",
    "Be brief.",
)

TEST_REPEAT_WORDS = 50
TEST_NUMBERS = 25  # per direction
TEST_LISTS = 25  # per position
TRAIN_LISTS = 1800
SYSTEM_SHARE = 0.25
GRPO_LISTS = 2000  # half first, half last (beside every NEW_WORDS word in every REPEAT phrasing)


def number_facts(step: int) -> list[tuple[int, int]]:
    """(n, n + step) for two-digit n, with no carry or borrow and no whole-number token."""
    facts = []
    for n in range(10, 100):
        answer = n + step
        if answer // 10 != n // 10 or n in WHOLE_QUESTION or answer in WHOLE_ANSWER:
            continue
        facts.append((n, answer))
    return facts


def build(seed: int = SEED) -> tuple[list[dict], list[dict]]:
    """(train rows, test rows), each {"question", "answer", "kind"}; a pure function of seed."""
    rng = random.Random(seed)
    train: list[dict] = []
    test: list[dict] = []

    def item(kind: str, question: str, answer: str) -> dict:
        return {"question": question, "answer": answer, "kind": kind}

    # repeat: test words are never asked to be repeated in train
    words = list(WORDS)
    rng.shuffle(words)
    held = words[:TEST_REPEAT_WORDS]
    test += [item("repeat", rng.choice(REPEAT).format(w=w), w) for w in held]
    train += [item("repeat", template.format(w=w), w)
              for w in words[TEST_REPEAT_WORDS:] for template in REPEAT]

    # after/before: a test fact is asked in no phrasing in train
    for kind, step, templates in (("after", 1, AFTER), ("before", -1, BEFORE)):
        facts = number_facts(step)
        rng.shuffle(facts)
        test += [item(kind, rng.choice(templates).format(n=n), str(answer))
                 for n, answer in facts[:TEST_NUMBERS]]
        train += [item(kind, template.format(n=n), str(answer))
                  for n, answer in facts[TEST_NUMBERS:] for template in templates]

    # first/last of three different words: test lists are never seen in train
    def triple() -> tuple[str, str, str]:
        a, b, c = rng.sample(WORDS, 3)
        return a, b, c

    used: set[tuple[str, str, str]] = set()
    for kind, templates, index in (("first", FIRST, 0), ("last", LAST, 2)):
        count = 0
        while count < TEST_LISTS:
            words3 = triple()
            if words3 in used:
                continue
            used.add(words3)
            a, b, c = words3
            test.append(item(kind, rng.choice(templates).format(a=a, b=b, c=c), words3[index]))
            count += 1
    for count in range(TRAIN_LISTS):
        while (words3 := triple()) in used:
            pass
        used.add(words3)
        kind, templates, index = (("first", FIRST, 0), ("last", LAST, 2))[count % 2]
        a, b, c = words3
        train.append(item(kind, rng.choice(templates).format(a=a, b=b, c=c), words3[index]))

    rng.shuffle(train)
    rng.shuffle(test)
    return train, test


def list_words(question: str) -> tuple[str, ...]:
    """The quoted words of a question, in order."""
    return tuple(question.split('"')[1::2])


def build_grpo(train: list[dict], test: list[dict], seed: int = SEED) -> list[dict]:
    """GRPO prompts only the rules answer: repeat questions of NEW_WORDS, and first/last
    questions of WORDS lists in neither split; a pure function of the splits and seed."""
    rng = random.Random(seed + 2)
    rows = [{"question": template.format(w=w), "answer": w, "kind": "repeat"}
            for w in NEW_WORDS for template in REPEAT]
    used = {list_words(row["question"]) for row in train + test
            if row["kind"] in ("first", "last")}
    for count in range(GRPO_LISTS):
        while (words3 := tuple(rng.sample(WORDS, 3))) in used:
            pass
        used.add(words3)
        kind, templates, index = (("first", FIRST, 0), ("last", LAST, 2))[count % 2]
        a, b, c = words3
        rows.append({"question": rng.choice(templates).format(a=a, b=b, c=c),
                     "answer": words3[index], "kind": kind})
    rng.shuffle(rows)
    return rows


def chat(row: dict, system: str | None) -> list[dict]:
    turns = [{"role": "system", "content": system}] if system else []
    return turns + [{"role": "user", "content": row["question"]},
                    {"role": "assistant", "content": row["answer"]}]


def render(seed: int = SEED) -> dict[str, str]:
    """{file name: text} of the two splits and the GRPO prompts."""
    train, test = build(seed)
    rng = random.Random(seed + 1)
    train_lines = []
    for row in train:
        system = rng.choice(SYSTEMS) if rng.random() < SYSTEM_SHARE else None
        train_lines.append(json.dumps({"messages": chat(row, system)}))
    test_lines = [json.dumps({"messages": chat(row, None), **row}) for row in test]
    grpo_lines = [json.dumps({"messages": chat(row, None), **row})
                  for row in build_grpo(train, test, seed)]
    return {"train.jsonl": "\n".join(train_lines) + "\n",
            "test.jsonl": "\n".join(test_lines) + "\n",
            "grpo.jsonl": "\n".join(grpo_lines) + "\n"}


def main() -> None:
    for name, text in render().items():
        (HERE / name).write_text(text, encoding="utf-8", newline="\n")
        print(f"wrote {HERE / name} ({text.count(chr(10))} rows)")


if __name__ == "__main__":
    main()
