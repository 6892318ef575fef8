"""The vocabulary of scripts/make_prompts.py: the 160 original training prompts and the topic lists its
templates draw from (data only; the generator and the held-out rule live in make_prompts.py)."""

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
