"""Build data/prompts_train.jsonl: the instructions whose teacher completions train the SmolLM2 draft.

Deterministic and offline (plain Python, a seeded `random.Random`, no network, no model):

    python scripts/make_prompts.py --out data/prompts_train.jsonl --count 2000 --seed 0

Output: the 160 hand-written prompts of the first data set (ORIGINAL, unchanged and first, so older runs stay
comparable), then prompts made from task templates x topics until `--count` lines in all. The generated part
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


# ----------------------------------------------------------------------------------- the original 160

ORIGINAL = tuple("""
Explain how photosynthesis works in simple terms.
What are the main causes of the French Revolution?
Write a short poem about autumn leaves.
Give me three tips for improving my sleep.
How do I make a basic tomato sauce from scratch?
What is the difference between a virus and a bacterium?
Write a Python function that checks whether a string is a palindrome.
Summarize the plot of Romeo and Juliet in a few sentences.
What are some good habits for saving money?
Explain what a black hole is to a ten-year-old.
Write a friendly email inviting my coworkers to a team lunch.
How does a refrigerator keep food cold?
List five interesting facts about octopuses.
What is the Pythagorean theorem and how is it used?
Describe the water cycle.
Write a short story about a robot who learns to paint.
How can I become a better public speaker?
What is machine learning?
Give me a recipe for chocolate chip cookies.
Why is the sky blue?
Explain the difference between weather and climate.
Write a haiku about mountains.
What are the benefits of regular exercise?
How do vaccines work?
Write a SQL query that returns the ten most recent orders from an orders table.
What should I pack for a weekend camping trip?
Explain the concept of supply and demand.
Describe the life cycle of a butterfly.
How do I write a good cover letter?
What were the main achievements of the Roman Empire?
Write a limerick about a cat who loves to sleep.
How does the internet work?
What is the difference between a list and a tuple in Python?
Suggest a name for a small coffee shop and explain your choice.
Explain how a bill becomes a law in the United States.
What are renewable energy sources?
Write a thank-you note to a teacher.
How do airplanes stay in the air?
What is the capital of Australia, and what is it known for?
Give me a workout plan for a beginner.
Explain recursion with an example.
Describe a typical day in the life of a medieval farmer.
What is inflation and why does it happen?
Write a motivational message for someone starting a new job.
How do I care for a houseplant?
What are the planets in our solar system?
Explain the rules of chess briefly.
Write a JavaScript function that reverses an array.
What is the greenhouse effect?
How can I reduce stress at work?
Describe the taste of a lemon to someone who has never had one.
What is democracy?
Write a product description for a reusable water bottle.
How does the human heart pump blood?
What are the main differences between cats and dogs as pets?
Explain what DNA is.
Write a short dialogue between a customer and a waiter.
What is the best way to learn a new language?
How do earthquakes happen?
Write a bash command that counts the lines in all text files in a folder.
What is the significance of the printing press?
Give me some ideas for a rainy day at home.
Explain the difference between speed and velocity.
Write a birthday message for my grandmother.
How do bees make honey?
What is a prime number? Give some examples.
Describe the city of Paris in a few sentences.
How do I change a flat tire?
What is the role of the United Nations?
Write a Python class that represents a bank account with deposit and withdraw methods.
What causes the seasons on Earth?
Explain what an API is.
Write a short speech for a school graduation.
How is glass made?
What are some healthy breakfast ideas?
Explain the theory of evolution.
Write a review of an imaginary science fiction movie.
How do solar panels generate electricity?
What is the difference between an alligator and a crocodile?
Give me tips for writing clean code.
Describe how to brew a good cup of tea.
What is the function of the kidneys?
Write a riddle and give its answer.
How do I calculate the area of a circle?
What was the Industrial Revolution?
Explain how compound interest works.
Write a packing list for a beach vacation.
What is the difference between HTTP and HTTPS?
How do plants grow from seeds?
Write a short fable with a moral.
What are the symptoms of dehydration?
Explain the concept of gravity.
How can I organize my desk better?
What is a sonnet?
Write a Python script that reads a CSV file and prints the average of a column.
How do tides work?
What is the purpose of a resume?
Describe the Great Wall of China.
How can I be more productive in the morning?
Explain what a neural network is.
Write an apology message to a friend for missing their party.
What are the three states of matter?
How does a compass work?
Give me a simple recipe for pancakes.
What is the difference between a noun and a verb?
Explain how elections work in a parliamentary system.
Write a short poem about the moon.
How do I start running if I have never run before?
What are fossils and how are they formed?
Explain the difference between RAM and storage.
Write instructions for making a paper airplane.
Why do we need sleep?
What is a budget and how do I make one?
Describe the main features of Gothic architecture.
How does a microwave oven heat food?
What is a metaphor? Give two examples.
Write a function in C that computes the factorial of a number.
What are the main causes of climate change?
How do I politely decline an invitation?
Explain what the stock market is.
Write a short description of a forest at night.
What are antibiotics and when should they be used?
How does a bicycle work?
List some classic novels everyone should read.
Explain the basics of how a computer processor works.
Write a tweet announcing the opening of a new bookstore.
What is the difference between empathy and sympathy?
How do volcanoes form?
Give me advice for my first job interview.
Explain the difference between git merge and git rebase.
Write a lullaby for a baby.
What is the Renaissance?
How can I improve my handwriting?
What is the speed of light and why does it matter?
Describe the rules of soccer.
Write a Python function that returns the n-th Fibonacci number.
How does recycling help the environment?
What is meditation and how do I start?
Explain what a hash table is.
Write a short mystery story opening.
What foods are high in protein?
How did the ancient Egyptians build the pyramids?
What is the difference between a lake and a pond?
Give me tips for taking better photos with my phone.
Explain how a car engine works.
Write a welcome message for new members of a book club.
What is the immune system?
How do I make friends in a new city?
Explain the difference between a comet and an asteroid.
Write a regular expression that matches an email address and explain it.
What are the main ingredients of bread?
How do birds know where to migrate?
Describe the benefits of reading books.
What is a good way to learn to play the guitar?
Explain what cloud computing is.
Write a short letter to your future self.
How do rainbows form?
What is the difference between a republic and a monarchy?
Give me a plan for cleaning my house in one afternoon.
Explain how to solve a quadratic equation.
""".strip().splitlines())

# -------------------------------------------------------------------------------------------- topics

SCIENCE = [
    "gravity", "evolution by natural selection", "the water cycle", "plate tectonics", "black holes", "DNA",
    "the immune system", "antibiotic resistance", "the greenhouse effect", "entropy", "chemical bonds",
    "acids and bases", "the periodic table", "magnetism", "sound waves", "nuclear fusion", "radioactivity",
    "the Doppler effect", "friction", "buoyancy", "static electricity", "the ozone layer", "cellular respiration",
    "the nervous system", "hormones", "enzymes", "food chains", "biodiversity", "erosion", "the Big Bang",
    "genetic mutations", "osmosis", "the carbon cycle", "light refraction", "kinetic and potential energy",
    "Newton's laws of motion", "the theory of relativity", "ecosystems", "climate feedback loops",
    "the scientific method", "absolute zero", "the electromagnetic spectrum", "ocean currents",
]
TECH = [
    "encryption", "the Domain Name System", "open-source software", "compilers", "databases", "version control",
    "browser cookies", "two-factor authentication", "GPS", "3D printing", "binary numbers", "caching",
    "virtual memory", "blockchain", "public-key cryptography", "computer viruses", "data compression",
    "pixels and screen resolution", "the cloud", "bandwidth and latency", "spam filters", "QR codes",
]
SOCIETY = [
    "opportunity cost", "globalisation", "human rights", "the separation of powers", "freedom of speech",
    "urbanisation", "the minimum wage", "carbon footprints", "interest rates", "taxation", "the gig economy",
    "diminishing returns", "the tragedy of the commons", "universal healthcare", "fair trade",
]
ARTS = [
    "impressionism", "jazz", "perspective in drawing", "irony", "alliteration", "the hero's journey",
    "rhythm in music", "the golden ratio", "surrealism", "the rule of thirds in photography", "minimalism",
    "foreshadowing", "the blues", "abstract art", "colour theory",
]
HEALTH = [
    "sleep cycles", "metabolism", "vitamins", "the placebo effect", "mindfulness", "muscle growth", "allergies",
    "cholesterol", "blood pressure", "dietary fibre", "the circadian rhythm", "posture", "caffeine",
]
PROGRAMMING = [
    "list comprehensions in Python", "closures in JavaScript", "Python decorators", "promises in JavaScript",
    "SQL joins", "regular expressions", "Big O notation", "unit testing", "exception handling",
    "linked lists", "REST APIs", "Git branches", "binary search", "garbage collection", "dependency injection",
    "Python generators", "async and await", "type hints in Python", "database indexes", "the call stack",
    "pure functions", "immutability", "environment variables", "JSON", "sorting algorithms",
]
CONCEPTS = SCIENCE + TECH + SOCIETY + ARTS + HEALTH

MECHANISMS = [
    "a thermostat", "an airplane wing", "a submarine", "a digital camera", "a touchscreen", "a heat pump",
    "a wind turbine", "a search engine", "noise-cancelling headphones", "a pin tumbler lock",
    "a hydroelectric dam", "a hot-air balloon", "a loudspeaker", "a barcode scanner", "an elevator",
    "a parachute", "a nuclear reactor", "the human eye", "the human ear", "the lungs", "the liver",
    "a lightning rod", "an electric motor", "a battery", "a fridge magnet", "a smoke detector", "a pressure cooker",
    "a washing machine", "a 3D printer", "a satellite", "a radio", "a fibre-optic cable",
    "a hybrid car", "a water filter", "a sewing machine", "an induction hob", "a fountain pen",
    "a mechanical watch", "a suspension bridge",
]
EVENTS = [
    "the fall of the Roman Empire", "the Black Death", "the American Revolution", "the Silk Road",
    "the Cold War", "the Apollo moon landing", "the abolition of slavery", "the Meiji Restoration",
    "the voyages of Zheng He", "the Protestant Reformation", "the invention of the telephone",
    "the Great Depression", "the fall of the Berlin Wall", "the Magna Carta", "the Mongol Empire",
    "the Aztec Empire", "the Ottoman Empire", "the women's suffrage movement", "the Scientific Revolution",
    "the Age of Exploration", "the partition of India", "the civil rights movement", "the Viking Age",
    "the Inca Empire", "the Second World War", "the Russian Revolution", "the Gold Rush in California",
    "the invention of writing", "the Agricultural Revolution", "the Han dynasty", "the Battle of Hastings",
    "the Renaissance in Florence", "the founding of the European Union", "the space race",
    "the end of apartheid in South Africa",
]
PEOPLE = [
    "Marie Curie", "Leonardo da Vinci", "Isaac Newton", "Ada Lovelace", "Nelson Mandela", "Cleopatra",
    "Genghis Khan", "Mahatma Gandhi", "Charles Darwin", "Frida Kahlo", "Wolfgang Amadeus Mozart",
    "Albert Einstein", "Galileo Galilei", "Florence Nightingale", "Confucius", "Alan Turing", "Harriet Tubman",
    "Nikola Tesla", "Jane Austen", "William Shakespeare", "Ibn Battuta", "Rosalind Franklin", "Simon Bolivar",
    "Queen Victoria", "Abraham Lincoln", "Mansa Musa", "Katherine Johnson", "Ludwig van Beethoven",
    "Julius Caesar", "Amelia Earhart", "Johannes Gutenberg", "Vincent van Gogh", "Grace Hopper",
    "Socrates", "Catherine the Great",
]
COUNTRIES = [
    "Japan", "Brazil", "Kenya", "Iceland", "Egypt", "Canada", "Peru", "Vietnam", "Morocco", "Norway",
    "New Zealand", "India", "Mexico", "Italy", "Argentina", "South Korea", "Ghana", "Turkey", "Portugal",
    "Chile", "Indonesia", "Ireland", "Ethiopia", "Thailand", "Poland", "Switzerland", "Nepal", "Colombia",
]
CITIES = [
    "Tokyo", "Istanbul", "Rome", "Cairo", "Barcelona", "Kyoto", "Lisbon", "Buenos Aires", "Cape Town",
    "Vancouver", "Prague", "Edinburgh", "Marrakesh", "Hanoi", "Amsterdam", "Mexico City", "Seoul", "Vienna",
    "Copenhagen", "New York", "Sydney", "Berlin", "Singapore", "Dublin",
]
NATURE_PLACES = [
    "the Amazon rainforest", "the Sahara Desert", "the Great Barrier Reef", "the Himalayas", "Antarctica",
    "the Grand Canyon", "the Nile River", "the Mediterranean Sea", "Lake Baikal", "the Arctic tundra",
    "Yellowstone National Park", "the Galapagos Islands", "the Dead Sea", "the Alps", "the Mariana Trench",
    "the Serengeti", "the Atacama Desert", "Victoria Falls",
]
ANIMALS = [
    "honeybees", "elephants", "penguins", "owls", "ants", "dolphins", "bats", "wolves", "sea turtles",
    "chameleons", "salmon", "crows", "cheetahs", "frogs", "camels", "koalas", "sharks", "tardigrades",
    "hummingbirds", "beavers", "polar bears", "spiders", "giraffes", "jellyfish", "parrots", "snails",
    "kangaroos", "seahorses",
]
DISHES = [
    "a vegetable stir-fry", "guacamole", "a lentil soup", "a Greek salad", "homemade pizza dough", "fried rice",
    "banana bread", "a mushroom risotto", "hummus", "a simple chickpea curry", "French toast", "a fruit smoothie",
    "roast chicken", "a cheese omelette", "vegetable lasagna", "fish tacos", "miso soup", "potato salad",
    "apple crumble", "a spinach quiche", "gazpacho", "pad thai", "falafel", "a classic burger",
    "overnight oats", "a carrot cake", "a tomato and mozzarella salad", "spaghetti carbonara", "a bean chili",
    "lemonade",
]
SKILLS = [
    "playing the piano", "learning a new language as an adult", "training for a 5K run", "speaking in public",
    "drawing portraits", "saving money every month", "writing a novel", "growing tomatoes", "meditating",
    "touch typing", "playing chess", "swimming", "landscape photography", "knitting",
    "learning to code", "managing my time", "negotiating a salary", "keeping a journal", "cycling to work",
    "rock climbing", "juggling", "decluttering my home", "training a puppy", "cutting down on screen time",
    "cooking for one person", "giving feedback to colleagues", "working from home without distractions",
    "composting", "learning to sing", "reading more books", "drinking less coffee", "waking up early",
]
HOWTO = [
    "tie a bowline knot", "jump-start a car", "unclog a kitchen drain", "remove a coffee stain from a shirt",
    "back up the photos on my phone", "plant a tree", "clean a cast-iron pan", "hang a picture straight",
    "brew pour-over coffee", "sharpen a kitchen knife", "fold a fitted sheet", "do a proper push-up",
    "start a vegetable garden", "build a campfire safely", "wrap a present neatly", "patch a small hole in a wall",
    "iron a dress shirt", "create a strong password", "make cold brew coffee", "pack a suitcase efficiently",
    "repot a houseplant", "clean a laptop keyboard", "boil an egg perfectly", "paint a room",
    "set up a budget spreadsheet", "write a haiku", "change a bicycle inner tube", "descale a kettle",
    "defrost a freezer", "read a nutrition label", "check the oil in a car", "tie a tie",
    "make a paper crane", "sew on a button", "whistle with my fingers", "remove a splinter",
]
PLANS = [
    "a weekend trip to the mountains", "three months of learning basic Spanish", "a birthday dinner for six people",
    "a calm morning routine", "a small balcony garden", "a monthly budget for a student living alone",
    "a 30-day reading challenge", "a move to a new apartment", "a family picnic in the park",
    "a productive study week before finals", "a beginner strength-training routine", "a zero-waste week",
    "a board game night with friends", "a one-week road trip along the coast", "a surprise party for a coworker",
    "a week of healthy packed lunches", "a school science fair project", "a digital detox weekend",
    "a charity bake sale", "swimming lessons for an adult beginner",
]
POEM_SUBJECTS = [
    "a cup of morning coffee", "an old bookshop", "the ocean at night", "a long train journey",
    "a summer thunderstorm", "a garden in spring", "a cat asleep in the sun", "the stars over the desert",
    "a forgotten letter", "a busy market", "the last day of school", "a mountain lake", "fireflies",
    "a city at dawn", "a lonely robot", "my grandmother's kitchen", "a paper boat", "friendship", "hope",
    "the passing of time", "home", "courage", "the changing seasons", "a bicycle ride", "the first day of spring",
    "an empty playground", "a hot cup of tea", "the smell of fresh bread", "a sunflower field", "the night sky",
]
STORY_PREMISES = [
    "a girl who finds a map in her attic", "a dragon who is afraid of fire", "two rivals stuck in an elevator",
    "a village where it never stops snowing", "a cat who solves mysteries", "a time traveller who arrives a day late",
    "a baker who enters a strange contest", "a lost dog finding its way home", "an astronaut alone on Mars",
    "a talking tree", "a boy who can speak to birds", "a ghost who is afraid of people", "a shy giant",
    "a family moving to a new country", "a clock that runs backwards", "a pirate who gets seasick",
    "the last bookstore in town", "a friendship between a fox and a crow", "a robot gardener",
    "a detective who cannot remember faces", "a kite that flies away with a letter", "a magic umbrella",
    "an inventor whose machine grants one wish", "a librarian who guards a secret door",
    "a snowman who wants to see summer",
]
EMAILS = [
    "to my manager asking for a day off next Friday", "to a colleague thanking them for their help on a project",
    "to a customer apologising for a late delivery", "to my neighbour about their loud music at night",
    "to a professor asking for an extension on an essay", "to a hotel asking about early check-in",
    "to an old friend I have not spoken to in years", "to a company declining a job offer",
    "to my team announcing a new meeting schedule", "to a restaurant about a disappointing meal",
    "to a client following up on an unpaid invoice", "to a school asking about enrolment for next year",
    "to a recruiter asking about the status of my application", "to a gym cancelling my membership",
    "to my child's teacher asking for a meeting", "to a bookshop asking whether a book is in stock",
    "to a coworker congratulating them on a promotion", "to an event organiser asking about accessibility",
    "to a library asking to renew a book", "to a supplier asking for a discount on a large order",
]
WRITING = [
    "a thank-you letter to a coach", "a letter of recommendation for a hardworking student",
    "a letter to a pen pal in another country", "a complaint letter to an airline about lost luggage",
    "a letter to the local council asking for more bike lanes",
    "a letter to my grandparents describing my first week at university", "a short, polite resignation letter",
    "a toast for my best friend's wedding", "a short motivational speech for a youth football team",
    "a poster text for a neighbourhood clean-up day", "a welcome speech for a school open day",
    "a short bio for a freelance photographer", "a social media post announcing a new cafe",
    "an invitation to a housewarming party", "a farewell card message for a retiring colleague",
    "a short newsletter introduction for a gardening club", "a product description for a handmade wooden chair",
    "a condolence message for a friend who lost their dog", "an out-of-office reply for a two-week holiday",
    "a short announcement that the office will be closed on Monday",
]
DEBATES = [
    "working from home", "living in a big city", "owning a dog", "renting a home instead of buying one",
    "learning online", "nuclear power", "social media for teenagers", "homeschooling", "a four-day work week",
    "self-driving cars", "fast fashion", "school uniforms", "taking a gap year", "rooftop solar panels",
    "studying abroad", "freelancing", "buying organic food", "zoos", "universal basic income",
    "daylight saving time", "open-plan offices", "standing desks", "e-books compared with paper books",
    "space tourism", "online shopping", "a vegan diet", "banning cars from city centres", "tipping in restaurants",
]
PAIRS = [
    ("a violin", "a viola"), ("rugby", "American football"), ("green tea", "black tea"),
    ("baking soda", "baking powder"), ("a frog", "a toad"), ("a cold", "the flu"), ("an ocean", "a sea"),
    ("mitosis", "meiosis"), ("a rabbit", "a hare"),
    ("latitude", "longitude"), ("an atom", "a molecule"), ("a psychologist", "a psychiatrist"),
    ("'affect'", "'effect'"), ("a fruit", "a vegetable"), ("a star", "a planet"), ("TCP", "UDP"),
    ("SQL databases", "NoSQL databases"), ("a compiler", "an interpreter"), ("weight", "mass"),
    ("a hill", "a mountain"), ("yoga", "pilates"), ("butter", "margarine"), ("a haiku", "a sonnet"),
    ("Baroque music", "Classical music"),
    ("inductive reasoning", "deductive reasoning"), ("a recession", "a depression"), ("HTML", "CSS"),
    ("a library", "a framework in programming"), ("stress", "anxiety"), ("a leopard", "a jaguar"),
    ("a village", "a town"), ("a mean", "a median"), ("a process", "a thread"), ("an epidemic", "a pandemic"),
    ("a democracy", "a dictatorship"), ("a typhoon", "a cyclone"), ("an LED bulb", "an incandescent bulb"),
    ("a podcast", "a radio show"), ("sunscreen", "sunblock"), ("a crow", "a raven"),
]
LIST_TOPICS = [
    "animals that live in the desert", "uses for baking soda around the house", "famous paintings and who painted them",
    "inventions that changed the world", "healthy snacks to take to work", "indoor hobbies for a rainy weekend",
    "board games for families", "books a teenager might enjoy", "ways to reduce plastic waste",
    "careers in science", "of the tallest mountains in the world", "of the largest countries by area",
    "things to pack for a day hike", "fun facts about the human body", "questions to ask at the end of a job interview",
    "cheap date ideas", "ways to save energy at home", "exercises you can do without equipment",
    "spices every kitchen should have", "wonders of the ancient world", "common English idioms and their meanings",
    "houseplants that are easy to care for", "ways to make a small room feel bigger", "good habits for programmers",
    "famous bridges around the world", "musical instruments from different cultures", "ways to be kinder to yourself",
    "outdoor games for children", "foods that are rich in iron", "classic science fiction novels",
    "ways to practise gratitude", "fruits that grow in tropical climates", "famous scientists and their discoveries",
    "podcast topic ideas", "ways to make a commute more enjoyable", "ways to cool a bedroom without air conditioning",
]
QUESTIONS = [
    "Why do leaves change colour in autumn?", "How far is the Sun from the Earth?",
    "How many bones are in the adult human body?", "Why do we have leap years?", "Why is the ocean salty?",
    "What causes thunder?", "Why do cats purr?", "How old is the universe?", "Why do onions make you cry?",
    "How do fireflies glow?", "What makes popcorn pop?", "Why does ice float on water?", "Why do we dream?",
    "What causes hiccups?", "Why do we yawn?", "What is the largest desert on Earth?", "Why is Mars red?",
    "Who wrote Pride and Prejudice?", "Why do stars twinkle?", "What causes the northern lights?",
    "How does soap remove germs?", "Why do we get goosebumps?", "How deep is the deepest part of the ocean?",
    "What is the hottest planet in the solar system?", "Why do heavy ships float?", "Why is gold so valuable?",
    "How did sailors navigate before GPS?", "What is the smallest country in the world?",
    "Why do we have time zones?", "Why are diamonds so hard?", "How long does sunlight take to reach Earth?",
    "Why does bread go stale?", "Why do some people need glasses?", "What makes a rainbow curved?",
    "Why do our fingers wrinkle in water?", "How do chameleons change colour?", "Why is the Dead Sea so salty?",
    "Who invented the light bulb?", "What is the longest river in the world?", "Why do we sneeze?",
    "How do noise-cancelling headphones block sound?", "Why do cats land on their feet?",
    "How many languages are spoken in the world?", "Why does the Moon look bigger near the horizon?",
    "What is the fastest land animal?", "Why do apples turn brown after they are cut?",
]
WORDS = [
    "serendipity", "ubiquitous", "ephemeral", "nostalgia", "resilience", "paradox", "pragmatic", "meticulous",
    "ambiguous", "eloquent", "benevolent", "candid", "diligent", "frugal", "gregarious", "inevitable", "lucid",
    "melancholy", "nuance", "obsolete", "procrastinate", "quintessential", "reluctant", "scrutinize",
    "tenacious", "verbose", "whimsical", "zealous", "altruism", "catalyst", "dichotomy", "empirical", "hubris",
    "juxtaposition", "mundane", "novice", "ostracize", "plausible", "redundant", "sarcasm", "euphemism",
    "hypothesis", "stoic", "pessimist", "integrity",
]
FORMAL_SENTENCES = [
    "The committee has decided to postpone the meeting until further notice due to unforeseen circumstances.",
    "Please ensure that all personal belongings are removed from the premises prior to departure.",
    "The proliferation of smartphones has fundamentally altered patterns of social interaction.",
    "Mitigating climate change necessitates a substantial reduction in greenhouse gas emissions.",
    "The defendant was acquitted owing to insufficient evidence.",
    "Regular physical activity is associated with a decreased risk of cardiovascular disease.",
    "The municipality will implement new regulations regarding waste disposal next quarter.",
    "Individuals experiencing symptoms should refrain from attending the workplace.",
    "The software update addresses several vulnerabilities that could be exploited remotely.",
    "Our organisation endeavours to facilitate collaboration across departments.",
    "The novel's protagonist grapples with the moral ambiguity of her choices.",
    "Subsequent to the merger, numerous employees were reassigned to different roles.",
    "The acquisition of the painting was contingent upon the approval of the board.",
    "Excessive consumption of sugary beverages may contribute to dental decay.",
    "The archaeologists unearthed artefacts dating back several millennia.",
    "Students are required to submit their assignments no later than the stipulated deadline.",
    "The algorithm's running time grows quadratically with the size of its input.",
    "In light of recent feedback, we have revised our returns policy accordingly.",
    "Commuters are advised to anticipate delays owing to scheduled maintenance works.",
    "The tenant shall be liable for any damage caused to the property during the lease.",
]
CASUAL_SENTENCES = [
    "hey, can't make it tomorrow, something came up, sorry!", "the food was ok but we waited forever",
    "gonna be late, traffic is crazy", "thanks a ton for the help yesterday, you saved me",
    "can u send me the file asap", "this phone is way too expensive for what it does",
    "the meeting was kind of pointless tbh", "i think we should just go with the other plan",
    "not sure the project will be done by friday", "loved the party, let's do it again soon",
    "your package is stuck somewhere, no idea when it'll show up", "the printer's broken again, someone fix it pls",
    "can we move our call to later? swamped today", "great job on the slides, they looked awesome",
]
PHRASES = [
    "good morning", "thank you very much", "where is the train station?", "I would like a cup of tea, please",
    "how much does this cost?", "nice to meet you", "see you tomorrow", "I am learning your language",
    "could you speak more slowly?", "happy birthday", "the bill, please", "I am lost",
]
LANGUAGES = ["Spanish", "French", "German", "Italian", "Portuguese", "Dutch"]
WORKS = [
    "Moby-Dick", "Pride and Prejudice", "the Odyssey", "Frankenstein by Mary Shelley",
    "Alice's Adventures in Wonderland", "A Christmas Carol", "The Adventures of Tom Sawyer", "Don Quixote",
    "the legend of Robin Hood", "the legend of King Arthur", "Little Women", "Treasure Island",
    "Around the World in Eighty Days", "The Wonderful Wizard of Oz", "Hamlet", "Macbeth", "Jane Eyre",
    "Gulliver's Travels", "The Jungle Book", "The Little Prince", "Twenty Thousand Leagues Under the Seas",
    "The Count of Monte Cristo", "Dracula", "Peter Pan",
]
SITUATIONS = [
    "I get very nervous before giving presentations.", "My roommate never cleans up after themselves.",
    "I keep putting off an important assignment.", "I just moved to a city where I do not know anyone.",
    "My friend forgot my birthday and I feel hurt.", "I have too many browser tabs and too little focus.",
    "My teenage son spends all evening playing video games.", "I want to ask for a raise but I am scared.",
    "I have trouble falling asleep on Sunday nights.", "My coworker keeps taking credit for my work.",
    "I want to start exercising but I have very little free time.", "I spend too much money on takeaway food.",
    "My old laptop has become really slow.", "I have two job offers and cannot decide between them.",
    "My neighbour's dog barks all day while they are at work.", "I feel overwhelmed by my email inbox.",
    "I want to eat more vegetables but I do not like most of them.", "I forget the names of people I meet.",
    "I have a long flight coming up and I hate flying.", "My houseplants keep dying.",
    "I want to learn to draw but I think I have no talent.", "My group project partners are not doing their part.",
]
PY_TASKS = [
    "counts the vowels in a string", "flattens a nested list", "finds the most common word in a text",
    "converts Celsius to Fahrenheit", "checks whether a number is prime", "reverses the order of words in a sentence",
    "computes the average of a list of numbers, ignoring None values", "groups a list of words by their first letter",
    "returns the second largest number in a list", "counts how many times each character appears in a string",
    "removes punctuation from a string", "finds the longest word in a sentence", "rotates a list by k positions",
    "checks whether two strings are anagrams", "converts a Roman numeral to an integer",
    "computes the factorial of a number without recursion", "splits a list into chunks of size n",
    "capitalises the first letter of every word in a string", "computes the greatest common divisor of two numbers",
    "converts a number of seconds into hours, minutes and seconds", "generates a random password of a given length",
    "checks whether a year is a leap year", "adds up two dictionaries, summing values for shared keys",
    "transposes a matrix given as a list of lists", "finds the missing number in a list of 1 to n",
    "counts the words in a text file", "implements binary search", "checks whether brackets in a string are balanced",
    "converts a decimal number to binary", "returns all the prime numbers below n",
    "computes the running total of a list", "finds the first non-repeating character in a string",
    "validates that a password has a digit, a capital letter and at least eight characters",
    "parses a date string like 2024-03-15 and returns the day of the week", "simulates rolling two dice 1000 times",
    "returns the n largest values in a dictionary", "checks whether a sentence is a pangram",
    "converts a string to snake_case", "computes the median of a list", "reverses a string using a stack",
]
JS_TASKS = [
    "capitalises the first letter of a string", "counts the vowels in a string", "checks whether a number is prime",
    "returns the largest number in an array", "converts Fahrenheit to Celsius", "debounces another function",
    "shuffles an array in place", "checks whether a string is a palindrome, ignoring spaces",
    "formats a number as a price with two decimals", "groups an array of objects by a given key",
    "returns the number of days between two dates", "deep-clones a plain object",
    "fetches JSON from a URL and logs one of its fields", "counts how often each word appears in a text",
    "sorts an array of people by age", "validates a simple email address", "builds a countdown timer",
    "turns a query string into an object", "generates a random hex colour", "chunks an array into groups of n",
    "toggles a CSS class on a button when it is clicked", "converts a camelCase string to kebab-case",
]
SQL_TASKS = [
    "counts the number of customers in each city", "lists employees who earn more than their manager",
    "finds duplicate email addresses in a users table", "returns the average order value per month",
    "finds customers who have never placed an order", "lists the three most expensive products in each category",
    "returns the total sales for each salesperson in 2023", "finds students who passed every exam",
    "deletes rows older than 30 days from a logs table", "returns the second highest salary in an employees table",
    "counts orders per day for the last week", "joins a books table and an authors table to list titles with names",
    "finds the busiest hour of the day from a visits table", "updates the stock of a product after a sale",
    "lists departments with more than ten employees", "returns each user's most recent login",
]
CODE_SNIPPETS = [
    "[x * x for x in range(10) if x % 2 == 0]", "sorted(words, key=len, reverse=True)",
    "dict(zip(keys, values))", "' '.join(reversed(sentence.split()))", "any(n % d == 0 for d in range(2, n))",
    "with open('data.txt') as f: lines = f.read().splitlines()", "a, b = b, a",
    "collections.Counter(text.split()).most_common(3)", "items[::-1]", "max(scores, key=scores.get)",
    "sum(1 for c in s if c.isupper())", "{k: v for k, v in d.items() if v is not None}",
    "list(map(int, input().split()))", "enumerate(names, start=1)", "functools.lru_cache(maxsize=None)",
]
JS_SNIPPETS = [
    "const total = prices.reduce((a, b) => a + b, 0);", "const evens = nums.filter(n => n % 2 === 0);",
    "const copy = [...items];", "const { name, age } = person;", "setTimeout(() => console.log('hi'), 1000);",
    "const unique = [...new Set(tags)];", "document.querySelector('#title').textContent = 'Hello';",
    "const doubled = nums.map(n => n * 2);",
]


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
