r"""Strict, JSON-first extraction of a lettered answer from free-form model output.

The prompt asks for exactly one JSON object ``{"answer": "A", "reasoning": "..."}``. The
parser tries, in order, and records which rule fired (``method``):

1. ``json``: the whole output is that object (string ``answer`` and ``reasoning``; the answer
   matches ``^[A-C]\b``, so ``"B. The grandson"`` counts as B).
2. ``json_fenced``: the same inside a Markdown code fence (```` ```json ... ``` ````).
3. ``letter_dot``: the first line is ``"B. <text>"`` / ``"B) <text>"``. It is a failure when
   ``<text>`` starts with another option's text and not B's (*inconsistent*), or when the
   next line is another lettered option (the output echoes the *option_list*).
4. ``letter_only``: the first line is just the letter (``"B"``, ``"(B)"``, ``"B."``).
5. ``json_prefix``: output that starts with a leading ``{"answer": "B"`` whose object was cut
   off (e.g. by the token limit); if a complete object follows, it is ``json_embedded``.
6. ``answer_colon``: a line like ``"Answer: B"`` or ``"The answer is B"``; another such line
   naming a different letter makes the output *conflicting*, and text after the letter that
   names another option makes it *inconsistent* (both failures).
7. ``json_embedded``: the first complete JSON object with a valid answer anywhere in the text.
8. ``option_text``: the first line equals exactly one option's text (case and final period
   ignored).

Anything else is a parse failure (``answer`` is None, ``method == "failure"``, ``detail``
says why): failures are counted, never guessed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass

#: option letters, in order
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
STRICT_METHODS = ("json", "json_fenced")
METHODS = (
    "json",
    "json_fenced",
    "letter_dot",
    "letter_only",
    "json_prefix",
    "answer_colon",
    "json_embedded",
    "option_text",
    "failure",
)
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class ParsedAnswer:
    """Result of parsing one model output.

    Attributes:
        answer: The chosen letter, or None on a parse failure.
        reasoning: The reasoning text when the output carried one, else None.
        method: The rule that produced the answer (see module docstring), or "failure".
        detail: Why parsing failed: "empty", "option_list", "inconsistent", "conflicting" or
            "no_answer".
    """

    answer: str | None
    reasoning: str | None
    method: str
    detail: str | None = None

    @property
    def parsed(self) -> bool:
        """True when an answer letter was extracted."""
        return self.answer is not None

    @property
    def strict(self) -> bool:
        """True when the output was the requested JSON object."""
        return self.method in STRICT_METHODS

    def to_json(self) -> str:
        """Compact JSON, the form kept in lm-eval's ``filtered_resps``."""
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> ParsedAnswer:
        """Inverse of :meth:`to_json`."""
        return cls(**json.loads(text))


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().strip(".").strip().casefold()


def _first_line(text: str) -> str:
    stripped = text.strip().lstrip(".):").strip()
    return stripped.splitlines()[0] if stripped else ""


class AnswerParser:
    """Parser for one set of option letters (default ``"ABC"``)."""

    def __init__(self, letters: str = "ABC"):
        if not letters or not letters.isalpha() or not letters.isupper():
            raise ValueError(f"`letters` must be upper-case letters, got {letters!r}")
        self.letters = letters
        cls = f"[{re.escape(letters)}]"
        self._answer_value = re.compile(rf"^\s*({cls})\b")
        self._letter_dot = re.compile(rf"^\s*\(?({cls})[.):]\s*(.*)$")
        self._letter_only = re.compile(rf"^\s*\(?({cls})\)?[.:]?\s*$")
        self._answer_colon = re.compile(
            rf"^\s*\**\s*(?:the\s+)?(?:correct\s+|final\s+)?answer\s*\**\s*(?:is|:|-)\s*\**\s*"
            rf"(?:option\s+)?\(?({cls})\b",
            re.IGNORECASE | re.MULTILINE,
        )
        self._json_prefix = re.compile(rf'^\s*\{{\s*"answer"\s*:\s*"\s*({cls})\b')

    # -- helpers -------------------------------------------------------------------------
    def _from_object(self, obj: object, *, need_reasoning: bool) -> tuple[str, str | None] | None:
        if not isinstance(obj, dict) or not isinstance(obj.get("answer"), str):
            return None
        match = self._answer_value.match(obj["answer"])
        if match is None:
            return None
        reasoning = obj.get("reasoning")
        if need_reasoning and not isinstance(reasoning, str):
            return None
        return match.group(1), reasoning if isinstance(reasoning, str) else None

    def _contradicts(self, letter: str, said: str, options: Sequence[str]) -> bool:
        """True when ``said`` starts with another option's text but not with ``letter``'s."""
        said = _normalise(said)
        if not said:
            return False
        starts = [
            i for i, o in enumerate(options) if _normalise(o) and said.startswith(_normalise(o))
        ]
        return bool(starts) and self.letters.index(letter) not in starts

    def _strict(self, text: str) -> tuple[str, str | None] | None:
        try:
            return self._from_object(json.loads(text), need_reasoning=True)
        except (json.JSONDecodeError, ValueError):
            return None

    def _embedded(self, text: str) -> tuple[str, str | None] | None:
        decoder = json.JSONDecoder()
        for start in (m.start() for m in re.finditer(r"\{", text)):
            try:
                obj, _ = decoder.raw_decode(text, start)
            except json.JSONDecodeError:
                continue
            found = self._from_object(obj, need_reasoning=False)
            if found is not None:
                return found
        return None

    # -- public --------------------------------------------------------------------------
    def parse(self, text: str | None, options: Sequence[str]) -> ParsedAnswer:
        """Parse one output; ``options`` are the option texts in letter order."""
        if len(options) > len(self.letters):
            raise ValueError(f"{len(options)} options but only letters {self.letters!r}")
        text = (text or "").strip()
        if not text:
            return ParsedAnswer(None, None, "failure", "empty")

        found = self._strict(text)
        if found:
            return ParsedAnswer(found[0], found[1], "json")
        fence = _FENCE.search(text)
        if fence and (found := self._strict(fence.group(1).strip())):
            return ParsedAnswer(found[0], found[1], "json_fenced")

        lines = [line for line in text.splitlines() if line.strip()]
        first, rest = lines[0], "\n".join(lines[1:]).strip() or None
        if match := self._letter_only.match(first):
            return ParsedAnswer(match.group(1), rest, "letter_only")
        if match := self._letter_dot.match(first):
            letter, said = match.group(1), match.group(2)
            following = self._letter_dot.match(lines[1]) if len(lines) > 1 else None
            if following and following.group(1) != letter:
                return ParsedAnswer(None, None, "failure", "option_list")
            if self._contradicts(letter, said, options):
                return ParsedAnswer(None, None, "failure", "inconsistent")
            return ParsedAnswer(letter, rest, "letter_dot")

        if match := self._json_prefix.match(text):
            found = self._embedded(text)
            if found is None:
                return ParsedAnswer(match.group(1), None, "json_prefix")
            return ParsedAnswer(found[0], found[1], "json_embedded")

        claims = list(self._answer_colon.finditer(text))
        letters = {m.group(1) for m in claims}
        if len(letters) > 1:
            return ParsedAnswer(None, None, "failure", "conflicting")
        if claims:
            letter = claims[0].group(1)
            if self._contradicts(letter, _first_line(text[claims[0].end():]), options):
                return ParsedAnswer(None, None, "failure", "inconsistent")
            return ParsedAnswer(letter, text, "answer_colon")

        if found := self._embedded(text):
            return ParsedAnswer(found[0], found[1], "json_embedded")

        hits = [i for i, option in enumerate(options) if _normalise(first) == _normalise(option)]
        if len(hits) == 1:
            return ParsedAnswer(self.letters[hits[0]], rest, "option_text")
        return ParsedAnswer(None, None, "failure", "no_answer")


ABC_PARSER = AnswerParser("ABC")


def parse_abc(text: str | None, options: Sequence[str]) -> ParsedAnswer:
    """Parse a three-option (A/B/C) answer."""
    return ABC_PARSER.parse(text, options)
