"""Example prompts by task: one set for the page's example picker and the benchmark's default prompts.

Each is written so a base model continues it usefully (the bundled Gemma 3 270M has no chat
template); the tasks differ in how much of the answer can be copied from the prompt, which is
what decides whether drafting pays.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .i18n import DEFAULT_LANGUAGE, t


@dataclass(frozen=True)
class Example:
    name: str  # shown in the page
    category: str  # Spec-Bench-style category for the benchmark
    text: str
    # Where the bundled model cannot do this task in a language: (language, what it does instead and what to try), in
    # English here and `example.<id>.weak.<language>` in the locales; shown under the examples on that language's page.
    weak_in: tuple[tuple[str, str], ...] = ()
    note: str = ""  # the localized example's note: this language's entry of `weak_in`, translated ("" where none)
    # The new tokens in which the bundled Gemma does the task in each language and stops at the end of its answer
    # (greedy, float32: `tests/test_examples_end.py` runs each to its count and checks where it ends). A picked
    # example sets the page's new-token count to it, so the run shows the task and not the ramble that follows it
    # (the next question, the next note, the next capital); none: the page's count stands (free writing and the
    # repeated list run on by design).
    new_tokens: tuple[tuple[str, int], ...] = ()

    def new_tokens_in(self, lang: str = DEFAULT_LANGUAGE) -> int | None:
        """The new-token count this example's task takes in `lang` (None: the page's count stands)."""
        return dict(self.new_tokens).get(lang)

    @property
    def question_id(self) -> str:
        return "ex-" + self.name.lower().replace(" ", "-")

    def localized(self, lang: str = DEFAULT_LANGUAGE) -> "Example":
        """The same task written in `lang` (name and prompt); the benchmark keeps the English set."""
        key = f"example.{self.question_id}"
        weak = dict(self.weak_in)
        note = t(f"{key}.weak.{lang}", lang, default=weak[lang]) if lang in weak else ""
        if lang == DEFAULT_LANGUAGE:
            return dataclasses.replace(self, note=note)
        return dataclasses.replace(self, name=t(f"{key}.name", lang, default=self.name),
                                   text=t(f"{key}.text", lang, default=self.text), note=note)


EXAMPLES: tuple[Example, ...] = (
    # The rename's first line is given: a base model carries a pattern on, it does not follow instructions. Prompt
    # lookup copies the old lines and the target refuses the copied `total` where `subtotal` goes.
    Example("Edit code", "code", (
        "def cart_total(items):\n"
        "    total = 0\n"
        "    for item in items:\n"
        "        total += item.price * item.quantity\n"
        "    return total\n\n"
        "# The same function with `total` renamed to `subtotal`:\n"
        "def cart_total(items):\n"
        "    subtotal = 0\n"
    ), new_tokens=(("en", 24), ("ru", 24), ("ar", 24))),  # to the function's end (then: the next rename)
    # Asked for one sentence, the bundled model copies the article; notes it fills from the article.
    Example("Summarise", "summarization", (
        "Article: The city council approved a plan on Tuesday to turn the old railway station into a public "
        "library. The library will open in 2026 and will include a children's reading room, a café and a rooftop "
        "garden. The project will cost 12 million euros, paid for by the city and a national culture fund.\n\n"
        "Summary in notes:\n- What: a public library in the old railway station\n- Opens:"
    ), new_tokens=(("en", 15), ("ru", 25), ("ar", 23))),  # two notes (then: "- What:" again and again)
    Example("Answer from a passage", "rag", (
        "Passage: The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is "
        "named after the engineer Gustave Eiffel, whose company designed and built the tower from 1887 to 1889. "
        "It is 330 metres tall.\n\n"
        "Question: Who is the Eiffel Tower named after?\n"
        "Answer:"
    ), new_tokens=(("en", 31), ("ru", 14), ("ar", 13))),  # the answer (then: a question of its own)
    # Into English: the bundled model translates into English far better than out of it.
    Example("Translate", "translation", (
        "French: Merci beaucoup.\nEnglish: Thank you very much.\n\n"
        "French: Bonjour.\nEnglish: Good morning.\n\n"
        "French: Où est la gare ?\nEnglish:"
    ), new_tokens=(("en", 7), ("ru", 7), ("ar", 7))),  # the translation (then: the same pair again)
    Example("Free writing", "writing", "Once upon a time, in a small village at the edge of a great forest, there lived",
            weak_in=(("ar", "The bundled Gemma 3 270M writes little coherent Arabic on its own: the story soon repeats "
                            "a phrase. It does better where there is text to carry on or copy: try “Translate” (into "
                            "English), “Answer from a passage” or “Repeat a list”."),)),
    Example("Repeat a list", "repetition", (
        "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday. Monday, Tuesday, Wednesday, Thursday, "
        "Friday, Saturday, Sunday. Monday, Tuesday,"
    )),
    # A pattern to carry on: asked alone ("The capital of France is"), the model circles ("the capital of ...").
    Example("Short fact", "qa", (
        "The capital of Italy is Rome.\nThe capital of Japan is Tokyo.\nThe capital of France is"
    ), new_tokens=(("en", 11), ("ru", 11), ("ar", 13))),  # Paris and one more capital (then: made-up ones in ar)
)

BY_NAME: dict[str, Example] = {e.name: e for e in EXAMPLES}


def localized_examples(lang: str = DEFAULT_LANGUAGE) -> tuple[Example, ...]:
    """The example prompts in the page's language (the same tasks, written in it)."""
    return tuple(example.localized(lang) for example in EXAMPLES)
