import pytest

from lm_eval_ext.tasks.common.answer_parser import AnswerParser, ParsedAnswer, parse_abc

OPTIONS = ["The grandfather", "The grandson", "Can't be determined"]


@pytest.mark.parametrize(
    ("text", "answer", "method"),
    [
        ('{"answer": "B", "reasoning": "The context says so."}', "B", "json"),
        ('  {"answer": "C. Can\'t be determined", "reasoning": "Not stated."}\n', "C", "json"),
        ('```json\n{"answer": "A", "reasoning": "r"}\n```', "A", "json_fenced"),
        ('Here you go:\n```\n{"answer": "B", "reasoning": "r"}\n```', "B", "json_fenced"),
        ("B", "B", "letter_only"),
        ("(C)", "C", "letter_only"),
        ("A.\nBecause he is old.", "A", "letter_only"),
        ("A. The grandfather", "A", "letter_dot"),
        ("B) The grandson, since the context says he struggled.", "B", "letter_dot"),
        ("C. Can't be determined\n\nQuestion: Who was not comfortable?", "C", "letter_dot"),
        ('{"answer": "C", "reasoning": "the context does not', "C", "json_prefix"),
        ("Answer: B", "B", "answer_colon"),
        ("The answer is C. Can't be determined.", "C", "answer_colon"),
        ("I think so.\nThe correct answer is (A)", "A", "answer_colon"),
        ('Sure! {"answer": "A", "reasoning": "r"} Hope it helps.', "A", "json_embedded"),
        ("The grandson.", "B", "option_text"),
        ("the grandfather\n\nQuestion: repeated", "A", "option_text"),
    ],
)
def test_parser_accepts(text, answer, method):
    parsed = parse_abc(text, OPTIONS)
    assert (parsed.answer, parsed.method) == (answer, method)
    assert parsed.parsed and parsed.detail is None


def test_strict_json_keeps_reasoning():
    parsed = parse_abc('{"answer": "B", "reasoning": "He struggled."}', OPTIONS)
    assert parsed.reasoning == "He struggled." and parsed.strict


def test_json_without_reasoning_is_not_strict():
    parsed = parse_abc('{"answer": "B"}', OPTIONS)
    assert (parsed.answer, parsed.method, parsed.strict) == ("B", "json_embedded", False)


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("", "empty"),
        ("   \n ", "empty"),
        (None, "empty"),
        ("I cannot answer that.", "no_answer"),
        ('{"answer": "D", "reasoning": "x"}', "no_answer"),
        ("A. The grandfather\nB. The grandson\nC. Can't be determined", "option_list"),
        ("A. The grandson", "inconsistent"),
        ("The answer is A. The grandson", "inconsistent"),
        ("Answer: A\nAnswer: C", "conflicting"),
        ("The old man", "no_answer"),
    ],
)
def test_parser_failures_are_counted_not_guessed(text, detail):
    parsed = parse_abc(text, OPTIONS)
    assert parsed == ParsedAnswer(None, None, "failure", detail)
    assert not parsed.parsed


def test_json_roundtrip():
    parsed = parse_abc("Answer: B", OPTIONS)
    assert ParsedAnswer.from_json(parsed.to_json()) == parsed


def test_more_letters_for_longer_option_lists():
    parser = AnswerParser("ABCDE")
    assert parser.parse("Answer: E", ["a", "b", "c", "d", "e"]).answer == "E"
    with pytest.raises(ValueError, match="letters"):
        AnswerParser("abc")
    with pytest.raises(ValueError, match="options"):
        AnswerParser("AB").parse("A", ["x", "y", "z"])
