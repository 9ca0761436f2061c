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

BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in (BBQ,)}


def get_benchmark(name: str) -> Benchmark:
    """The pinned benchmark called ``name``."""
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise KeyError(
            f"unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}"
        ) from None
