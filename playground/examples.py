"""Example prompts by task: one set for the page's example picker and the benchmark's default prompts.

Each is written so a base model continues it usefully (the bundled Gemma 3 270M has no chat
template); the tasks differ in how much of the answer can be copied from the prompt, which is
what decides whether drafting pays.
"""

from __future__ import annotations

from dataclasses import dataclass

from .i18n import DEFAULT_LANGUAGE, t


@dataclass(frozen=True)
class Example:
    name: str  # shown in the page
    category: str  # Spec-Bench-style category for the benchmark
    text: str

    @property
    def question_id(self) -> str:
        return "ex-" + self.name.lower().replace(" ", "-")

    def localized(self, lang: str = DEFAULT_LANGUAGE) -> "Example":
        """The same task written in `lang` (name and prompt); the benchmark keeps the English set."""
        if lang == DEFAULT_LANGUAGE:
            return self
        key = f"example.{self.question_id}"
        return Example(t(f"{key}.name", lang, default=self.name), self.category, t(f"{key}.text", lang, default=self.text))


EXAMPLES: tuple[Example, ...] = (
    Example("Edit code", "code", (
        "Rename the variable `total` to `subtotal` in this function.\n\n"
        "def cart_total(items):\n"
        "    total = 0\n"
        "    for item in items:\n"
        "        total += item.price * item.quantity\n"
        "    return total\n\n"
        "def cart_total(items):\n"
    )),
    Example("Summarise", "summarization", (
        "Article: The city council approved a plan on Tuesday to turn the old railway station into a public "
        "library. The library will open in 2026 and will include a children's reading room, a café and a rooftop "
        "garden. The project will cost 12 million euros, paid for by the city and a national culture fund.\n\n"
        "Summary in one sentence:"
    )),
    Example("Answer from a passage", "rag", (
        "Passage: The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is "
        "named after the engineer Gustave Eiffel, whose company designed and built the tower from 1887 to 1889. "
        "It is 330 metres tall.\n\n"
        "Question: Who designed and built the Eiffel Tower, and when?\n"
        "Answer:"
    )),
    Example("Translate", "translation", (
        "English: Good morning, how are you?\nFrench: Bonjour, comment allez-vous ?\n\n"
        "English: The cat is sleeping on the sofa.\nFrench:"
    )),
    Example("Free writing", "writing", "Once upon a time, in a small village at the edge of a great forest, there lived"),
    Example("Repeat a list", "repetition", (
        "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday. Monday, Tuesday, Wednesday, Thursday, "
        "Friday, Saturday, Sunday. Monday, Tuesday,"
    )),
    Example("Short fact", "qa", "The capital of France is"),
)

BY_NAME: dict[str, Example] = {e.name: e for e in EXAMPLES}


def localized_examples(lang: str = DEFAULT_LANGUAGE) -> tuple[Example, ...]:
    """The example prompts in the page's language (the same tasks, written in it)."""
    return tuple(example.localized(lang) for example in EXAMPLES)
