"""A text prompt set covering the task kinds of the FSD paper's Table 6, written for this project.

The paper benchmarks MT-bench (conversation), HumanEval (code), GSM8K (maths), Alpaca
(instructions), CNN/DailyMail (summarisation) and Natural Questions (QA). Those data sets are not
shipped here; instead each kind has a handful of prompts in the same style, short enough for a
135M-parameter model and a 2-core machine. Two disjoint splits:

- ``BENCH``: what ``edge-spec-ros bench --task-set text`` decodes (per kind: τ, cache miss rate
  r, average early exit, SD→FSD speedup);
- ``TRAIN``: what ``train-exits --text tasks`` feeds the verifier to generate its own answers on,
  the data the exit adapters learn from; no bench prompt and no bench article is in it, so the
  benchmark measures exits on prompts and texts they were not trained on. (Until the headline
  prompts got articles of their own, they asked about the six articles the bench summarises: exits
  and drafters trained before that had read them, and their summarisation figures are optimistic.)
- ``DISTILL``: more prompts of every kind in the same style (disjoint from both), whose answers by
  the verifier a distilled drafter learns from (``training/drafter_distill.py``) beside ``TRAIN``'s.

Legend: τ — tokens per draft–verify round; r — pre-draft cache miss rate; EE — early exit.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from edge_spec_ros.models.prompt import EncodedPrompt, PromptConfig, PromptEncoder

TASK_KINDS = ("conversation", "code", "maths", "instructions", "summarisation", "qa")
# The paper's data set for each kind (Table 6), for the report.
PAPER_DATASETS = {"conversation": "MT-bench", "code": "HumanEval", "maths": "GSM8K", "instructions": "Alpaca",
                  "summarisation": "CNN/DM", "qa": "NQ"}
TEXT_SYSTEM_PROMPT = "You are a helpful AI assistant."

_ARTICLES = (
    ("The city council voted on Tuesday to turn the old railway yard into a public park. The project will "
     "add two hectares of green space, a playground and a cycle path along the river. Work starts in spring "
     "and should take eighteen months. Some residents worried about the cost, but most welcomed the plan."),
    ("A small robotics team from a local school won the regional competition this weekend. Their robot had "
     "to sort coloured blocks and climb a ramp in under two minutes. The students built it in six weeks "
     "from spare parts and will now travel to the national final in May."),
    ("Heavy rain caused flooding in several villages in the valley overnight. Roads were closed and around "
     "two hundred people spent the night in the community hall. Forecasters expect drier weather from "
     "Thursday, and the authorities have started to clear the roads."),
    ("Researchers have found that short walks after meals can lower blood sugar. In a study of fifty adults, "
     "a ten-minute walk after dinner reduced the rise in blood sugar by about a fifth compared with sitting. "
     "The authors say the habit is cheap and easy to adopt."),
    ("The museum reopened its science wing after a two-year renovation. Visitors can now try hands-on "
     "exhibits about electricity, light and sound, and a new planetarium shows the night sky every hour. "
     "Entry to the wing is free for children under twelve."),
    ("A bakery in the town centre has started giving unsold bread to a food bank every evening. The owner "
     "says about thirty loaves a day used to be thrown away. The food bank shares the bread with families "
     "and a shelter nearby."),
    ("The national library has put ten thousand old maps online. They show towns, roads and coastlines "
     "from the last three centuries, and anyone can zoom in and download them for free. Historians say the "
     "collection will help family researchers and schools."),
    ("Engineers have finished testing a new bridge across the harbour. It carries two lanes for cars, a "
     "bus lane and a wide path for walkers and cyclists. The bridge opens to traffic next month and should "
     "cut the journey across town by fifteen minutes."),
)
_BENCH_ARTICLES = _ARTICLES[:6]  # what the bench summarises: in no training prompt
_TRAIN_ARTICLES = _ARTICLES[6:]
# The headline prompts of the train split: articles of their own.
_HEADLINE_ARTICLES = (
    ("A farmer in the north has grown a pumpkin that weighs more than six hundred kilograms. It took a "
     "tractor and five neighbours to lift it onto a trailer for the county show, where it won first prize. "
     "The farmer says the secret is plenty of water and a little patience."),
    ("The town's swimming pool will close for three months from June for repairs to its roof and heating. "
     "Swimming lessons will move to the school pool across the road. The council says the work will cut "
     "the pool's energy bills by almost half."),
    ("Volunteers planted four thousand trees along the motorway on Saturday. The young oaks and birches "
     "will shelter nearby homes from noise and dust. Organisers hope to plant the same number again next "
     "winter."),
    ("A new app lets passengers see exactly where their bus is in real time. It was tested on three routes "
     "for a year, and complaints about late buses fell by a third. The app is free and now covers every "
     "route in the city."),
    ("Scientists counted more than two hundred puffins on the island this summer, the highest number in "
     "twenty years. They think cleaner water and more fish near the coast explain the rise. Visitors are "
     "asked to keep away from the nesting cliffs."),
    ("The local theatre is looking for actors of all ages for its winter play. No experience is needed, and "
     "rehearsals take place on Monday and Thursday evenings. Auditions are held at the theatre next "
     "Saturday morning."),
)

BENCH: dict[str, tuple[str, ...]] = {
    "conversation": (
        "Hi! I just moved to a new city and I don't know anyone. How can I make friends?",
        "I have a job interview tomorrow and I'm nervous. Any advice?",
        "What are some fun things to do on a rainy weekend at home?",
        "Can you recommend a simple routine to start exercising?",
        "My friend forgot my birthday. Should I tell them I'm upset?",
        "What is a good way to learn a new language as an adult?",
    ),
    "code": (
        "Write a Python function that returns the factorial of a number n.",
        "Write a Python function that checks whether a string is a palindrome.",
        "Write a Python function that returns the largest element of a list.",
        "Write a Python function that counts the vowels in a string.",
        "Write a Python function that reverses a list without using reverse().",
        "Write a Python function that returns the sum of the even numbers in a list.",
    ),
    "maths": (
        "Tom has 12 apples. He gives 5 to his sister and buys 8 more. How many apples does he have now?",
        "A train travels 60 kilometres per hour for 3 hours. How far does it go?",
        "A shirt costs 20 dollars and is on sale for 25 percent off. What is the sale price?",
        "Sara reads 15 pages a day. How many days does she need to read a 120-page book?",
        "What is 7 times 8 plus 6?",
        "A rectangle is 9 metres long and 4 metres wide. What is its area?",
    ),
    "instructions": (
        "Give three tips for staying healthy.",
        "Describe the colour blue to someone who cannot see.",
        "Write a short poem about the sea.",
        "List four benefits of reading books.",
        "Explain how to make a cup of tea.",
        "Write a thank-you note to a teacher.",
    ),
    "summarisation": tuple(f"Summarise the following article in one sentence.\n\n{a}" for a in _BENCH_ARTICLES),
    "qa": (
        "What is the capital of France?",
        "Who wrote Romeo and Juliet?",
        "What is the largest planet in the solar system?",
        "How many continents are there on Earth?",
        "What gas do plants take in from the air?",
        "What is the boiling point of water at sea level in Celsius?",
    ),
}

TRAIN: dict[str, tuple[str, ...]] = {
    "conversation": (
        "Hello! How are you today?",
        "I feel tired all the time. What could help me sleep better?",
        "What should I cook for dinner tonight?",
        "I want to start a garden on my balcony. Where do I begin?",
        "How do I stay motivated when studying for exams?",
        "Can you tell me a fun fact about space?",
        "I'm planning a trip to the mountains. What should I pack?",
        "How can I be more productive when working from home?",
    ),
    "code": (
        "Write a Python function that adds two numbers.",
        "Write a Python function that returns the nth Fibonacci number.",
        "Write a Python function that removes duplicates from a list.",
        "Write a Python function that checks if a number is prime.",
        "Write a Python function that converts Celsius to Fahrenheit.",
        "Write a Python function that returns the length of the longest word in a sentence.",
        "Write a Python class for a simple bank account with deposit and withdraw methods.",
        "Write a Python function that sorts a list of numbers with bubble sort.",
    ),
    "maths": (
        "Anna has 3 boxes with 6 pencils each. How many pencils does she have?",
        "What is 45 divided by 5?",
        "A car uses 8 litres of fuel per 100 kilometres. How much fuel does it use for 250 kilometres?",
        "Ben is 4 years older than Lily. Lily is 9. How old is Ben?",
        "What is 15 percent of 200?",
        "A pizza is cut into 8 slices. If 3 people eat 2 slices each, how many slices are left?",
        "What is the perimeter of a square with sides of 7 centimetres?",
        "If a book costs 12 dollars, how much do 4 books cost?",
    ),
    "instructions": (
        "Give three tips for saving money.",
        "Write a haiku about autumn.",
        "Explain what photosynthesis is in simple words.",
        "List five animals that live in the ocean.",
        "Describe a sunset in two sentences.",
        "Write a short story about a lost cat.",
        "Explain how to plant a tree.",
        "Give me a packing list for a day at the beach.",
    ),
    "summarisation": tuple(f"Summarise the following article in one sentence.\n\n{a}" for a in _TRAIN_ARTICLES)
    + tuple(f"Write a one-line headline for this article.\n\n{a}" for a in _HEADLINE_ARTICLES),
    "qa": (
        "What is the capital of Japan?",
        "Who painted the Mona Lisa?",
        "How many legs does a spider have?",
        "What is the chemical symbol for gold?",
        "Which ocean is the largest?",
        "What is the fastest land animal?",
        "In which country are the pyramids of Giza?",
        "How many days are there in a leap year?",
    ),
}


_CODE_TASKS = (
    "returns the minimum of a list", "counts the words in a sentence", "checks whether a year is a leap year",
    "returns the square of every number in a list", "joins a list of strings with commas",
    "returns the average of a list of numbers", "checks whether a list is sorted",
    "returns the first n square numbers", "capitalises the first letter of every word",
    "returns the greatest common divisor of two numbers", "converts kilometres to miles",
    "merges two sorted lists", "returns the index of an element in a list", "counts how often each letter occurs",
    "removes the spaces from a string", "returns the product of a list of numbers",
    "checks whether two strings are anagrams", "returns the last element of a list",
    "converts a list of numbers to strings", "returns the number of digits of an integer",
)
_MATHS = tuple(
    f"{name} has {a} {thing}. {pron} gets {b} more and gives away {c}. How many {thing} does {pron.lower()} have now?"
    for name, pron, thing, a, b, c in (
        ("Mia", "She", "stickers", 14, 6, 3), ("Leo", "He", "marbles", 23, 9, 11), ("Ava", "She", "books", 8, 5, 2),
        ("Sam", "He", "cards", 31, 4, 12), ("Zoe", "She", "shells", 17, 8, 6), ("Max", "He", "coins", 40, 15, 22),
    )
) + tuple(
    f"A {vehicle} travels {speed} kilometres per hour for {hours} hours. How far does it go?"
    for vehicle, speed, hours in (("bus", 50, 2), ("bicycle", 15, 4), ("plane", 800, 3), ("boat", 20, 5))
) + (
    "What is 9 times 6 minus 4?", "What is 144 divided by 12?", "What is 25 percent of 80?",
    "A square has sides of 5 metres. What is its area?", "A box holds 24 eggs. How many eggs are in 3 boxes?",
    "Lucy saves 7 dollars a week. How much does she save in 8 weeks?",
    "A class has 28 students and 4 tables. How many students sit at each table?",
    "What is the sum of 256 and 389?", "A film starts at 6:15 pm and lasts 95 minutes. When does it end?",
    "If 3 pens cost 6 dollars, how much do 7 pens cost?",
)
_TOPICS = ("the forest", "the city at night", "winter", "friendship", "the moon", "a rainy day", "music", "the desert",
           "a river", "the stars")
_QA = (
    "What is the capital of Italy?", "Who discovered penicillin?", "How many planets are in the solar system?",
    "What is the largest mammal on Earth?", "What language is spoken in Brazil?", "Who wrote Pride and Prejudice?",
    "What is the freezing point of water in Fahrenheit?", "What is the tallest mountain in the world?",
    "How many hours are in a day?", "What is the chemical symbol for water?", "Who was the first person on the moon?",
    "What is the longest river in Africa?", "How many sides does a hexagon have?", "What is the capital of Canada?",
    "Which planet is known as the red planet?", "What do bees make?", "Who invented the telephone?",
    "What is the main ingredient of guacamole?", "How many bones are in the adult human body?",
    "What is the currency of Japan?",
)
_CONVERSATION = (
    "Hi there! Can you help me plan my week?", "I can't decide between a cat and a dog. What do you think?",
    "What's a good book to read on holiday?", "How do I deal with stress at work?",
    "I want to learn to cook. Where should I start?", "My neighbour is very noisy at night. What should I do?",
    "Can you suggest a hobby I can do at home?", "How can I save money on groceries?",
    "I'm bored. Tell me something interesting.", "What should I say in a speech at my sister's wedding?",
    "How do I keep my plants alive?", "I want to wake up earlier. Any tips?",
    "What are some good questions to ask on a first date?", "How can I be a better listener?",
    "I failed my driving test. How do I stay positive?", "What's a healthy breakfast idea?",
    "How do I start running if I've never done it?", "What games can I play with my kids on a rainy day?",
    "How can I make my small apartment feel bigger?", "Do you have tips for a long flight?",
)
_INSTRUCTIONS = (
    *(f"Write a short poem about {t}." for t in _TOPICS[:5]),
    *(f"Describe {t} in three sentences." for t in _TOPICS[5:]),
    "Give three tips for learning to swim.", "List five fruits that are rich in vitamin C.",
    "Explain how a rainbow forms.", "Give four tips for a good night's sleep.", "Explain how to boil an egg.",
    "List three ways to reduce plastic waste.", "Write a short birthday message for a friend.",
    "Explain what gravity is to a child.", "Give three reasons to learn a musical instrument.",
    "Describe how to wash your hands properly.",
)
_SUMMARY_ASKS = ("Summarise this article in two sentences.", "What is the main point of this article?",
                 "List the key facts of this article.", "Write a short title for this article.",
                 "Explain this article to a child in one sentence.", "Give a one-sentence summary of this news.",
                 "What happened, according to this article?", "Summarise the article below in a few words.",
                 "Rewrite this article as one short sentence.", "Which facts in this article matter most?")

DISTILL: dict[str, tuple[str, ...]] = {
    "conversation": _CONVERSATION,
    "code": tuple(f"Write a Python function that {task}." for task in _CODE_TASKS),
    "maths": _MATHS,
    "instructions": _INSTRUCTIONS,
    "summarisation": tuple(f"{ask}\n\n{a}" for ask in _SUMMARY_ASKS for a in _TRAIN_ARTICLES),
    "qa": _QA,
}


@dataclass(frozen=True)
class TaskPrompt:
    """One text prompt of kind ``task`` (one of ``TASK_KINDS``), encoded for the verifier's tokenizer."""

    task: str
    text: str
    prompt: EncodedPrompt


def task_prompts(encoder: PromptEncoder, per_task: int | None = None, split: str = "bench",
                 tasks: tuple[str, ...] = TASK_KINDS) -> list[TaskPrompt]:
    """The first ``per_task`` prompts (None: all) of every kind in ``tasks``, in ``TASK_KINDS`` order,
    encoded without an image."""
    source = {"bench": BENCH, "train": TRAIN, "distill": DISTILL}.get(split)
    if source is None:
        raise ValueError(f"split must be 'bench', 'train' or 'distill', got {split!r}")
    unknown = set(tasks) - set(TASK_KINDS)
    if unknown:
        raise ValueError(f"unknown task kinds {sorted(unknown)}; choose from {TASK_KINDS}")
    if per_task is not None and per_task < 1:
        raise ValueError(f"need at least one prompt per task, got {per_task}")
    return [TaskPrompt(task, text, encoder.encode(text))
            for task in TASK_KINDS if task in tasks for text in source[task][:per_task]]


def text_encoder(tokenizer: PreTrainedTokenizerBase) -> PromptEncoder:
    """A prompt encoder with the text tasks' system prompt (no image)."""
    return PromptEncoder(tokenizer, PromptConfig(system_prompt=TEXT_SYSTEM_PROMPT))
