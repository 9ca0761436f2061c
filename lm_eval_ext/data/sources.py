"""Pinned upstream files: repository, commit, path, SHA-256, size and row count.

Nothing here is benchmark content; these are the identities the data layer checks
every file against. A folder given through ``LM_EVAL_EXT_DATA`` must use the same
relative paths (the upstream layout: ``<benchmark>/<path in the upstream repo>``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

RowFormat = Literal["jsonl", "csv", "csv_utf8_sig", "json_list"]


@dataclass(frozen=True)
class PinnedFile:
    """One upstream file: where it lives locally and where it is downloaded from."""

    path: str
    url: str
    sha256: str
    size: int
    rows: int
    row_format: RowFormat
    required: bool = True


@dataclass(frozen=True)
class Benchmark:
    """A benchmark's upstream origin and its pinned files."""

    name: str
    repo: str
    commit: str
    license: str
    files: tuple[PinnedFile, ...]

    def file(self, path: str) -> PinnedFile:
        """The pinned file at ``path`` (relative to the benchmark folder)."""
        for pinned in self.files:
            if pinned.path == path:
                return pinned
        known = ", ".join(p.path for p in self.files)
        raise KeyError(f"{self.name} has no pinned file {path!r}; known: {known}")


def _github(repo: str, commit: str, path: str) -> str:
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


_BBQ_REPO, _BBQ_COMMIT = "nyu-mll/BBQ", "bea11bd97d79217245b5871acd247b9d6eb24598"
_BBQ_FILES = {  # category -> (sha256, bytes, rows)
    "Age": ("46e805b3fc2d8cbd26eeb8e8430d98cf7b2dc9c83574ff3674e8ce4f0fca2a60", 3091834, 3680),
    "Disability_status": (
        "375d40d9b71f056150264445ec189b13934998f3f49a1e311aa7578eb3b45e5f", 1336984, 1556),
    "Gender_identity": (
        "8b5adbb368510a97d5775dc43e1c719e0249fe2da33f13c83e3e29edafec7a00", 4331406, 5672),
    "Nationality": (
        "a583e74666aec0341ded8aa3983e7cad694eb24de72c254d28b2df3035720090", 2900040, 3080),
    "Physical_appearance": (
        "e48d7e13508565f4801574e611043470c25c95a0a62af3699cb5ee7cb02608fb", 1347476, 1576),
    "Race_ethnicity": (
        "4a9f1214cfaa115ce7f0bdb40609122e431f5152c71b8ca64d665e483b946ae6", 6062426, 6880),
    "Race_x_SES": (
        "af8e2ae3d0e5be9ebcbfe7149e591d47ff649e263307f4548f7fb12f6a6d83e8", 11222218, 11160),
    "Race_x_gender": (
        "e5dbba782f8c4e25b99dd5470b5136e2db73dbf401cf6d4a5a3ed31b02f95696", 13094106, 15960),
    "Religion": ("cb9555f9f3454a52cd2df85956b59bd7fcca5aa922c8527693b1164d08417616", 1118728, 1200),
    "SES": ("9f92754bb037b0982604b9112705fb81d60a19d9e759c67e4a85e484a070f528", 5696950, 6864),
    "Sexual_orientation": (
        "2c71036b9e7584fe589c42aef32c1a42bc01b9a5e9b1b8704342630cdb08cefd", 729010, 864),
}

#: The 11 BBQ categories, in alphabetical order (the order of the upstream file names).
BBQ_CATEGORIES: tuple[str, ...] = tuple(sorted(_BBQ_FILES))

BBQ = Benchmark(
    name="bbq",
    repo=_BBQ_REPO,
    commit=_BBQ_COMMIT,
    license="CC-BY-4.0",
    files=tuple(
        PinnedFile(
            path=f"data/{category}.jsonl",
            url=_github(_BBQ_REPO, _BBQ_COMMIT, f"data/{category}.jsonl"),
            sha256=sha,
            size=size,
            rows=rows,
            row_format="jsonl",
        )
        for category, (sha, size, rows) in sorted(_BBQ_FILES.items())
    )
    + (
        PinnedFile(
            path="supplemental/additional_metadata.csv",
            url=_github(_BBQ_REPO, _BBQ_COMMIT, "supplemental/additional_metadata.csv"),
            sha256="f36708416b0e7adb81b47ad1926f9c39c2beb611702b73b01e06c9b6c9ffbd3d",
            size=5827321,
            rows=58556,
            row_format="csv",
        ),
    ),
)

_TQA_REPO, _TQA_COMMIT = "sylinrl/TruthfulQA", "d71c110897f5d31c5d7f309e7bc316c152f6f031"
TRUTHFULQA = Benchmark(
    name="truthfulqa", repo=_TQA_REPO, commit=_TQA_COMMIT, license="Apache-2.0",
    files=(
        PinnedFile("data/v1/TruthfulQA.csv", _github(_TQA_REPO, _TQA_COMMIT, "data/v1/TruthfulQA.csv"),
                   "f9bd9e859cc102cb1f647f1064da7e009be752c416845cf9fa56e6eaae403a7d", 476230, 817,
                   "csv_utf8_sig"),
        PinnedFile("data/v1/mc_task.json", _github(_TQA_REPO, _TQA_COMMIT, "data/v1/mc_task.json"),
                   "b3799639bc76c939836d587de7d30b48d91012cb34be04806d33106ce06c162a", 755456, 817,
                   "json_list"),
    ),
)

_CROWS_REPO, _CROWS_COMMIT = "nyu-mll/crows-pairs", "8aaac11c485473159ec9328a65253a5be9a479dc"
CROWS_PAIRS = Benchmark(
    name="crows_pairs", repo=_CROWS_REPO, commit=_CROWS_COMMIT, license="CC-BY-SA-4.0",
    files=(
        PinnedFile("data/crows_pairs_anonymized.csv",
                   _github(_CROWS_REPO, _CROWS_COMMIT, "data/crows_pairs_anonymized.csv"),
                   "dfb36986ce0502abbaf7055b9176da3d08d48e07df1251991b5dfbcbceab9d0c", 437764, 1508,
                   "csv"),
    ),
)

_XS_REPO, _XS_COMMIT = "paul-rottger/exaggerated-safety", "d7bb5bd738c1fcbc36edd83d5e7d1b71a3e2d84d"
_XS_COMPLETIONS = {  # model -> (sha256, bytes)
    "gpt4": ("71af323af8ecdec0efae23992317721441d2cfedddedeef3248f842f4e15c9ca", 259111),
    "llama2new": ("6365cc55ce0a593c7ab8785853d02784be027d97199d4077912b4313cd010099", 517476),
    "llama2orig": ("cbc52550e8ba8197a3e3d97a5af078d27bae4766737cd62df80270126a87ffc6", 470900),
    "mistralguard": ("0ac03817b65e019a8f5b4b3eed805086f9f7fafe538ac9ebd156f80210af6903", 303726),
    "mistralinstruct": ("6a146b65a5b96ec8249729bc2db459697175125998d7cbbcc88f7688ecf31dad", 371935),
}
XSTEST_COMPLETION_MODELS: tuple[str, ...] = tuple(_XS_COMPLETIONS)
XSTEST = Benchmark(
    name="xstest", repo=_XS_REPO, commit=_XS_COMMIT, license="CC-BY-4.0",
    files=(
        PinnedFile("xstest_prompts.csv", _github(_XS_REPO, _XS_COMMIT, "xstest_prompts.csv"),
                   "11783fb294ed017473ee53c207d71f2161c7672c8d0b037501e78387f801cb5a", 38719, 450,
                   "csv"),
    ) + tuple(
        PinnedFile(f"model_completions/xstest_v2_completions_{model}.csv",
                   _github(_XS_REPO, _XS_COMMIT,
                           f"model_completions/xstest_v2_completions_{model}.csv"),
                   sha, size, 450, "csv")
        for model, (sha, size) in _XS_COMPLETIONS.items()
    ),
)

# The human-annotated ToxiGen splits of HF `skg/toxigen-data` (gated), fetched through the
# GitHub mirror bramdelisse/toxigen-data whose LFS objects carry the same SHA-256.
_TG_REPO, _TG_COMMIT = "bramdelisse/toxigen-data", "c0bc65beb647077c2a47752d865041f756448c4e"
_TG_MEDIA = f"https://media.githubusercontent.com/media/{_TG_REPO}/{_TG_COMMIT}"
TOXIGEN = Benchmark(
    name="toxigen", repo=_TG_REPO, commit=_TG_COMMIT, license="MIT + CDLA-Permissive-2.0",
    files=(
        PinnedFile("annotated/annotated_train.csv", f"{_TG_MEDIA}/annotated/annotated_train.csv",
                   "968e6bf2b637cca1118f31e2ec085833d0fee38cbe0f102508239184e266e62a", 3054919, 8960,
                   "csv"),
        PinnedFile("annotated/annotated_test.csv", f"{_TG_MEDIA}/annotated/annotated_test.csv",
                   "31a15ddaec081f1799ef71b009e0c25dcc98142bc96f23487971317e4a865576", 348570, 940,
                   "csv", required=False),
    ),
)

BENCHMARKS: dict[str, Benchmark] = {
    b.name: b for b in (BBQ, TRUTHFULQA, CROWS_PAIRS, XSTEST, TOXIGEN)
}


def get_benchmark(name: str) -> Benchmark:
    """The pinned benchmark called ``name`` (an unknown name: a ConfigError with the closest)."""
    import difflib

    from lm_eval_ext.errors import ConfigError

    if name not in BENCHMARKS:
        close = difflib.get_close_matches(name, BENCHMARKS, n=1)
        raise ConfigError(f"unknown benchmark {name!r}"
                          + (f" (did you mean {close[0]}?)" if close else "")
                          + f"; known: {', '.join(sorted(BENCHMARKS))}")
    return BENCHMARKS[name]
