"""Build data/prompts_train.jsonl: the instructions whose teacher completions train the SmolLM2 draft.

Deterministic and offline (plain Python, a seeded `random.Random`, no network, no model):

    python scripts/make_prompts.py --out data/prompts_train.jsonl --count 2000 --seed 0

Output: the 160 hand-written prompts of the first data set (ORIGINAL, unchanged and first, so older runs stay
comparable), then prompts made from task templates x topics (both in scripts/prompt_vocab.py) until
`--count` lines in all. The generated part
draws from families (explain, how-it-works, history, people, places, animals, recipes, tips, how-to, plans,
poems, stories, emails/letters, pros and cons, comparisons, lists, factual questions, definitions,
rewriting/paraphrasing, phrase translation, book summaries, advice, Python/JavaScript/SQL tasks, reading
code, programming concepts, math word problems), each with several phrasings; a stride schedule with a
seeded jitter interleaves the templates in proportion to their family's weight, and a topic serves at most
`--per-topic` prompts.

Held-out rule (see data/README.md): a candidate is dropped when it is too similar to any prompt of
data/prompts_eval.jsonl or data/prompts_code_eval.jsonl, i.e. when the Jaccard similarity of the two
normalised word sets is >= 0.6 for either of two normalisations:
  - all words: lower-cased, apostrophes removed, split on anything that is not a-z or 0-9, plurals folded
    ("reaches" -> "reach", "stories" -> "story", "rockets" -> "rocket");
  - content words: the same, minus a fixed list of English function words (STOPWORDS).
The first catches template clones of an eval prompt ("What is the difference between X and Y?" shares most of
its words with an eval prompt of that shape), the second a paraphrase of its subject. The 160 original prompts
are kept as they are: all pass the content-word test; seven of them fail the all-words one (`all_words_clashes`,
listed in data/README.md) and are reported, not dropped. Candidates are also dropped when they duplicate a
kept prompt after case and punctuation normalisation (`norm_key`).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from conf.rundir import atomic_write_text  # noqa: E402

EVAL_FILES = (REPO / "data" / "prompts_eval.jsonl", REPO / "data" / "prompts_code_eval.jsonl")
THRESHOLD = 0.6

# ------------------------------------------------------------------------------------------ similarity rule

STOPWORDS = frozenset([
    "a", "an", "the", "and", "or", "but", "nor", "of", "to", "in", "on", "at", "for", "from", "by", "with", "about",
    "into", "onto", "over", "under", "as", "than", "then", "so", "if", "not", "no", "is", "are", "was", "were",
    "be", "been", "being", "am", "do", "does", "did", "doing", "done", "have", "has", "had", "having", "i", "me",
    "my", "mine", "we", "us", "our", "you", "your", "yours", "it", "its", "this", "that", "these", "those", "there",
    "here", "their", "they", "them", "he", "him", "his", "she", "her", "what", "which", "who", "whom", "whose",
    "how", "why", "when", "where", "can", "could", "would", "should", "will", "shall", "may", "might", "must",
    "please", "some", "any", "very", "just", "also", "each", "every", "all", "more", "most", "much", "many", "such",
    "own"
])


def _fold(word: str) -> str:
    """Crude plural / third-person folding so 'rockets' ~ 'rocket' and 'reaches' ~ 'reach'."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("ches", "shes", "sses", "xes", "zes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower().replace("'", "").replace("\u2019", ""))


def norm_key(text: str) -> str:
    """Case- and punctuation-insensitive identity of a prompt (duplicate detection)."""
    return " ".join(_tokens(text))


def word_set(text: str, content_only: bool = False) -> frozenset[str]:
    """The normalised word set of the held-out rule (all words, or content words only)."""
    words = (_fold(t) for t in _tokens(text))
    if content_only:
        return frozenset(w for w in words if w not in STOPWORDS)
    return frozenset(words)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


class HeldOut:
    """The eval prompts' word sets, and the rule `too_similar` that keeps training prompts away from them."""

    def __init__(self, prompts: Iterable[str], threshold: float = THRESHOLD):
        self.prompts = list(prompts)
        self.threshold = threshold
        self._all = [word_set(p) for p in self.prompts]
        self._content = [word_set(p, True) for p in self.prompts]

    def max_similarity(self, text: str, content_only: bool) -> tuple[float, str]:
        """The highest Jaccard similarity of `text` with an eval prompt, and that prompt."""
        mine = word_set(text, content_only)
        sets = self._content if content_only else self._all
        return max(((jaccard(mine, s), p) for s, p in zip(sets, self.prompts)), key=lambda t: t[0])

    def too_similar(self, text: str, content_only: bool | None = None) -> bool:
        """True if either normalisation (or the one named by `content_only`) reaches the threshold."""
        modes = (False, True) if content_only is None else (content_only,)
        return any(self.max_similarity(text, m)[0] >= self.threshold for m in modes)


def load_held_out(files: Iterable[Path] = EVAL_FILES) -> HeldOut:
    prompts = []
    for f in files:
        prompts += [json.loads(line)["prompt"] for line in Path(f).read_text().splitlines() if line.strip()]
    return HeldOut(prompts)


# The 160 original prompts and the topic lists: scripts/prompt_vocab.py (data only).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from prompt_vocab import (  # noqa: E402
    ANIMALS,
    CASUAL_SENTENCES,
    CITIES,
    CODE_SNIPPETS,
    CONCEPTS,
    COUNTRIES,
    DEBATES,
    DISHES,
    EMAILS,
    EVENTS,
    FORMAL_SENTENCES,
    HOWTO,
    JS_SNIPPETS,
    JS_TASKS,
    LANGUAGES,
    LIST_TOPICS,
    MECHANISMS,
    NATURE_PLACES,
    ORIGINAL,
    PAIRS,
    PEOPLE,
    PHRASES,
    PLANS,
    POEM_SUBJECTS,
    PROGRAMMING,
    PY_TASKS,
    QUESTIONS,
    SITUATIONS,
    SKILLS,
    SQL_TASKS,
    STORY_PREMISES,
    WORDS,
    WORKS,
    WRITING,
)

# -------------------------------------------------------------------------------------------- math


def _money(rng: random.Random, lo: int, hi: int, step: int = 1) -> int:
    return rng.randrange(lo, hi + 1, step)


def _math_problems() -> list[Callable[[random.Random], tuple[str, str]]]:
    """Word-problem makers: each returns (topic key, prompt) for random numbers."""

    def speed(r):
        t = r.randint(2, 6)
        d = t * r.randint(40, 120)
        return f"A train travels {d} kilometres in {t} hours. What is its average speed? Show your working."

    def sale(r):
        p, pct = _money(r, 20, 200, 5), r.choice([10, 15, 20, 25, 30, 40])
        return f"A jacket costs ${p} and is on sale for {pct}% off. What is the sale price?"

    def apples(r):
        c, b = r.randint(2, 6), r.randint(2, 5)
        a = b * c + r.randint(1, 9)
        name = r.choice(["Sara", "Liam", "Aisha", "Mateo", "Yuki", "Noah", "Priya", "Omar"])
        return f"{name} has {a} apples and gives {b} to each of {c} friends. How many apples are left?"

    def rectangle(r):
        w, h = r.randint(3, 25), r.randint(3, 40)
        return f"A rectangle is {w} cm wide and {h} cm long. What are its area and perimeter?"

    def percent(r):
        pct, n = r.choice([5, 12, 15, 20, 35, 45, 60, 75]), r.randrange(40, 1000, 20)
        return f"What is {pct}% of {n}? Explain the steps."

    def recipe(r):
        s, s2, g = r.choice([2, 4]), r.choice([6, 8, 10, 12]), r.randrange(150, 600, 50)
        return f"A recipe needs {g} grams of flour for {s} servings. How much flour do I need for {s2} servings?"

    def saving(r):
        m = _money(r, 10, 80, 5)
        goal = m * r.randint(6, 40) + r.choice([0, 0, 5])
        return f"If I save ${m} every week, how many weeks will it take me to save ${goal}?"

    def fuel(r):
        litres, d = r.choice([5, 6, 7, 8, 9]), r.randrange(150, 900, 50)
        return f"A car uses {litres} litres of fuel per 100 km. How much fuel does it need for a {d} km trip?"

    def linear(r):
        a, x, b = r.randint(2, 9), r.randint(-6, 12), r.randint(1, 30)
        return f"Solve for x: {a}x + {b} = {a * x + b}. Explain each step."

    def boys(r):
        n = r.choice([20, 24, 25, 28, 30, 32])
        k = r.randint(n // 4, 3 * n // 4)
        return f"A class has {n} students and {k} of them are girls. What percentage of the class are boys?"

    def tank(r):
        rate = r.randint(8, 40)
        v = rate * r.randint(10, 90)
        return f"A tank holds {v} litres and fills at {rate} litres per minute. How long does it take to fill?"

    def ages(r):
        a, b, c = r.randint(9, 40), r.randint(2, 8), r.randint(3, 15)
        return f"Tom is {a} years old and his sister is {b} years younger. How old will she be in {c} years?"

    def pizza(r):
        s = r.choice([6, 8, 10, 12])
        e = r.randint(1, s - 1)
        return f"A pizza is cut into {s} slices and {e} are eaten. What fraction is left, in lowest terms?"

    def interest(r):
        p, rate, y = r.randrange(500, 10001, 500), r.choice([2, 3, 4, 5, 6]), r.randint(2, 10)
        return f"If ${p} is invested at {rate}% simple interest per year, how much interest is earned after {y} years?"

    def average(r):
        nums = ", ".join(str(r.randint(3, 99)) for _ in range(r.randint(4, 7)))
        return f"What is the average of these numbers: {nums}? Show how you worked it out."

    def circle(r):
        return f"A circle has a radius of {r.randint(2, 30)} cm. What are its area and circumference?"

    def clock(r):
        h, m, dur = r.randint(6, 11), r.choice([0, 15, 20, 30, 45, 50]), r.randint(75, 400)
        return f"A film starts at {h}:{m:02d} and lasts {dur} minutes. At what time does it end?"

    def workers(r):
        w, d = r.randint(2, 6), r.randint(4, 12)
        w2 = r.choice([x for x in range(2, 13) if x != w and (w * d) % x == 0] or [w * 2])
        return (f"If {w} workers can paint a fence in {d} days, how long would {w2} workers take, "
                "working at the same rate?")

    def unit_price(r):
        a, pa, b, pb = r.choice([250, 500]), _money(r, 2, 6), r.choice([750, 1000]), _money(r, 5, 12)
        return (f"A {a} g box of cereal costs ${pa} and a {b} g box costs ${pb}. Which is the better deal "
                "per gram?")

    def cookies(r):
        per, n = r.randint(3, 12), r.randint(15, 99)
        return (f"Cookies are packed {per} to a bag. How many bags can be filled from {n} cookies, "
                "and how many are left?")

    return [speed, sale, apples, rectangle, percent, recipe, saving, fuel, linear, boys, tank, ages, pizza,
            interest, average, circle, clock, workers, unit_price, cookies]


# ------------------------------------------------------------------------------------------ families

# (name, weight, templates, topics). A template is formatted with the topic (a tuple is spread over {0}, {1}).
FAMILIES: list[tuple[str, float, list[str], list]] = [
    ("explain", 11, [
        "Explain {0} in simple terms.", "Can you explain {0} to a complete beginner?",
        "Why is it useful to understand {0}?", "Explain {0} to a ten-year-old.",
        "Give me a short, clear explanation of {0}.", "What are some common misconceptions about {0}?",
        "I have never really understood {0}. Could you explain it with an everyday example?",
        "Summarise the key ideas behind {0} in three sentences.",
    ], CONCEPTS),
    ("how-it-works", 6, [
        "How does {0} work?", "Explain how {0} works, step by step.",
        "What are the main parts of {0}, and what does each do?",
        "Describe how {0} works to someone with no technical background.",
    ], MECHANISMS),
    ("history", 6, [
        "Summarise {0} in a few sentences.", "Why is {0} considered so important?",
        "What were the main consequences of {0}?", "Give me five key facts about {0}.",
        "Explain {0} to a high-school student.", "What led to {0}?",
    ], EVENTS),
    ("people", 4, [
        "Who was {0}, and what is their legacy?", "Write a short biography of {0}.",
        "What were the greatest achievements of {0}?", "Tell me three interesting facts about {0}.",
    ], PEOPLE),
    ("countries", 3, [
        "Tell me about the geography of {0}.", "What are some traditional dishes from {0}?",
        "Describe the climate of {0} across the year.", "Give me a short overview of the history of {0}.",
        "What is daily life like in {0}?",
    ], COUNTRIES),
    ("cities", 2.5, [
        "Plan a three-day trip to {0}.", "What are the must-see sights in {0}?",
        "Give me tips for visiting {0} on a budget.", "Describe {0} to someone who has never been there.",
    ], CITIES),
    ("nature-places", 2, [
        "Describe {0} and the wildlife that lives there.", "Why is {0} important for the planet?",
        "What are some interesting facts about {0}?", "What threats are facing {0} today?",
    ], NATURE_PLACES),
    ("animals", 4, [
        "How do {0} survive in the wild?", "Tell me some surprising facts about {0}.",
        "What do {0} eat, and where do they live?", "How do {0} raise their young?",
        "Write a short poem about {0}.", "Explain how {0} have adapted to their environment.",
    ], ANIMALS),
    ("recipes", 5, [
        "Give me a simple recipe for {0}.", "How do I make {0} at home?", "What ingredients do I need for {0}?",
        "What are common mistakes people make when making {0}?", "Write a recipe for {0} that serves four people.",
        "How can I make {0} a bit healthier?",
    ], DISHES),
    ("tips", 6, [
        "Give me some tips for {0}.", "What mistakes do beginners make when {0}?",
        "Make a four-week plan for {0}.", "How can I stay motivated when {0}?",
        "What should I know before I start {0}?",
    ], SKILLS),
    ("how-to", 5, [
        "How do I {0}? Please give step-by-step instructions.", "Explain step by step how to {0}.",
        "What is the easiest way to {0}?", "Walk me through how to {0}.",
    ], HOWTO),
    ("plans", 3, [
        "Make a simple plan for {0}.", "Help me plan {0}.", "Create a step-by-step plan for {0}.",
        "What should I think about when planning {0}?",
    ], PLANS),
    ("poems", 5, [
        "Write a short poem about {0}.", "Write a haiku about {0}.", "Compose a four-line rhyming poem about {0}.",
        "Write a limerick about {0}.", "Write a free-verse poem about {0}.",
    ], POEM_SUBJECTS),
    ("stories", 5, [
        "Write a short story about {0}.", "Tell me a bedtime story about {0}.",
        "Write the opening paragraph of a story about {0}.", "Write a 100-word story about {0}.",
        "Write a funny short story about {0}.",
    ], STORY_PREMISES),
    ("emails", 4, [
        "Write a polite email {0}.", "Draft a short, friendly email {0}.", "Help me write a message {0}.",
        "Write a professional email {0}.",
    ], EMAILS),
    ("writing", 3.5, [
        "Write {0}.", "Help me draft {0}.", "Write {0}, in under 150 words.",
    ], WRITING),
    ("pros-cons", 4, [
        "What are the pros and cons of {0}?", "Give me the main arguments for and against {0}.",
        "Weigh the advantages and disadvantages of {0}.", "Write a balanced paragraph about {0}.",
    ], DEBATES),
    ("compare", 4, [
        "What is the difference between {0} and {1}?", "Compare {0} and {1}.",
        "How is {0} different from {1}?", "Explain the similarities and differences between {0} and {1}.",
    ], PAIRS),
    ("lists", 4.5, [
        "List five {0}.", "Give me a list of seven {0}.", "Name three {0}, with one sentence about each.",
        "Can you suggest ten {0}?",
    ], LIST_TOPICS),
    ("questions", 4, ["{0}", "{0} Please keep the answer short.", "Quick question: {lc}"], QUESTIONS),
    ("define", 3, [
        "Define the word '{0}' and use it in a sentence.", "What does '{0}' mean?",
        "Give me the meaning of '{0}' and two synonyms.",
    ], WORDS),
    ("simplify", 2.5, [
        "Rewrite this sentence in simpler words: \"{0}\"", "Explain what this sentence means in plain English: \"{0}\"",
        "Make this sentence easier for a child to understand: \"{0}\"",
        "Paraphrase this sentence without changing its meaning: \"{0}\"",
    ], FORMAL_SENTENCES),
    ("formal", 1.5, [
        "Rewrite this message in a formal tone: \"{0}\"", "How would I say this politely at work? \"{0}\"",
        "Turn this casual note into one professional sentence: \"{0}\"",
    ], CASUAL_SENTENCES),
    ("translate", 1.5, [
        "How do you say \"{0}\" in {1}?", "Translate \"{0}\" into {1} and explain the pronunciation.",
    ], [(p, lang) for p in PHRASES for lang in LANGUAGES]),
    ("books", 3, [
        "Summarise the plot of {0} in a few sentences.", "What is {0} about?",
        "Who are the main characters in {0}, and what happens to them?", "What themes does {0} explore?",
    ], WORKS),
    ("advice", 3, ["{0} What should I do?", "{0} Do you have any advice?", "{0} How can I handle this?"],
     SITUATIONS),
    ("python", 5, [
        "Write a Python function that {0}.", "Show me a Python function that {0}, with a short explanation.",
        "In Python, how would I write a function that {0}?", "Write a Python function that {0}, and add a few tests.",
    ], PY_TASKS),
    ("javascript", 2.5, [
        "Write a JavaScript function that {0}.", "Show me how to write a JavaScript function that {0}.",
    ], JS_TASKS),
    ("sql", 2, [
        "Write an SQL query that {0}.", "How would I write a SQL query that {0}?",
        "Write a SQL query that {0}, and explain how it works.",
    ], SQL_TASKS),
    ("read-code", 1.5, [
        "What does this Python code do? `{0}`", "Explain this line of Python: `{0}`",
    ], CODE_SNIPPETS),
    ("read-js", 0.7, ["What does this JavaScript line do? `{0}`", "Explain this JavaScript code: `{0}`"], JS_SNIPPETS),
    ("programming", 3, [
        "Explain {0} with a simple example.", "How would you teach {0} to a new programmer?",
        "Give me a beginner-friendly explanation of {0}.", "What are common mistakes people make with {0}?",
    ], PROGRAMMING),
]
MATH_WEIGHT = 6
MATH_PER_MAKER = 25


def _render(template: str, topic) -> str:
    args = topic if isinstance(topic, tuple) else (topic,)
    text = template.format(*args, lc=args[0][0].lower() + args[0][1:])  # {lc}: the topic, lower-case initial
    return text[0].upper() + text[1:]


def _candidates(rng: random.Random) -> list[tuple[float, int, str, str, str]]:
    """All candidates as (schedule key, order, family, topic key, prompt), in schedule order."""
    out: list[tuple[float, int, str, str, str]] = []

    def add(family: str, weight: float, cands: list[tuple[str, str]]) -> None:
        rng.shuffle(cands)
        for rank, (topic, text) in enumerate(cands):
            out.append(((rank + rng.random()) / weight, len(out), family, topic, text))

    for family, weight, templates, topics in FAMILIES:
        for template in templates:
            add(family, weight / len(templates), [(repr(t), _render(template, t)) for t in topics])
    makers = _math_problems()
    for maker in makers:
        texts = []
        for _ in range(MATH_PER_MAKER):
            text = maker(rng)
            texts.append((text, text))
        add("math", MATH_WEIGHT / len(makers), texts)
    out.sort()
    return out


def template_count() -> int:
    return sum(len(t) for _, _, t, _ in FAMILIES) + len(_math_problems())


def topic_count() -> int:
    keys: dict[str, None] = {}
    for _, _, _, topics in FAMILIES:
        keys.update((repr(t), None) for t in topics)
    return len(keys)


def generate(count: int, seed: int, held_out: HeldOut, per_topic: int = 3) -> tuple[list[str], dict[str, int]]:
    """ORIGINAL, then generated prompts up to `count` in all; also per-family counts and rejections."""
    if count < len(ORIGINAL):
        raise ValueError(f"--count must be >= {len(ORIGINAL)} (the original prompts are always kept)")
    rng = random.Random(seed)
    prompts = list(ORIGINAL)
    seen = {norm_key(p) for p in prompts}
    used: dict[str, int] = {}
    stats: dict[str, int] = {"original": len(ORIGINAL), "rejected_similar": 0, "rejected_duplicate": 0,
                             "rejected_topic_cap": 0}
    for _, _, family, topic, text in _candidates(rng):
        if len(prompts) >= count:
            break
        if used.get(topic, 0) >= per_topic:
            stats["rejected_topic_cap"] += 1
            continue
        key = norm_key(text)
        if key in seen:
            stats["rejected_duplicate"] += 1
            continue
        if held_out.too_similar(text):
            stats["rejected_similar"] += 1
            continue
        prompts.append(text)
        seen.add(key)
        used[topic] = used.get(topic, 0) + 1
        stats[family] = stats.get(family, 0) + 1
    if len(prompts) < count:
        raise ValueError(f"only {len(prompts)} prompts could be made (asked for {count}): add topics or templates")
    return prompts, stats


def all_words_clashes(prompts: Iterable[str], held_out: HeldOut) -> list[tuple[str, str, float]]:
    """Prompts whose all-words Jaccard with an eval prompt is >= the threshold: (prompt, eval prompt, value)."""
    out = []
    for p in prompts:
        sim, other = held_out.max_similarity(p, content_only=False)
        if sim >= held_out.threshold:
            out.append((p, other, round(sim, 3)))
    return out


def to_jsonl(prompts: Iterable[str]) -> str:
    return "".join(json.dumps({"prompt": p}) + "\n" for p in prompts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=REPO / "data" / "prompts_train.jsonl")
    ap.add_argument("--count", type=int, default=2000, help="prompts in all, the 160 original ones included")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-topic", type=int, default=3, help="at most this many prompts per topic")
    args = ap.parse_args(argv)
    held_out = load_held_out()
    prompts, stats = generate(args.count, args.seed, held_out, args.per_topic)
    atomic_write_text(args.out, to_jsonl(prompts))
    args.out.chmod(0o644)  # mkstemp's 0600 would survive the rename
    generated = len(prompts) - len(ORIGINAL)
    print(f"wrote {len(prompts)} prompts to {args.out}: {len(ORIGINAL)} original + {generated} generated "
          f"({template_count()} templates, {topic_count()} topics, seed {args.seed})")
    print("rejected: " + ", ".join(f"{k[9:]} {v}" for k, v in stats.items() if k.startswith("rejected_")))
    print("generated per family: " + ", ".join(f"{k} {v}" for k, v in stats.items()
                                              if k != "original" and not k.startswith("rejected_")))
    clashes = all_words_clashes(ORIGINAL, held_out)
    print(f"original prompts kept despite an all-words Jaccard >= {THRESHOLD} with an eval prompt: {len(clashes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
