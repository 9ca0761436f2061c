"""The metered models' own model args, declared (:class:`MeteredArgs`) and checked before a load.

lm-eval turns ``--model_args`` values into Python values loosely (``true``/``false`` become
booleans, digits ints, anything else stays a string), so ``sync=no`` arrives as the truthy
string ``"no"``. Every own arg is checked here, with a message naming the fix, so that a typo
costs no model load.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

from lm_eval_ext.backends import packaged_models
from lm_eval_ext.backends.chat_template import ChatTemplatePolicy
from lm_eval_ext.errors import ConfigError, check_choice
from lm_eval_ext.tasks.common.prompting import TASK_SETTING_KEYS

ENERGY_SOURCES = ("auto", "nvml", "rapl", "off")
#: extra ``from_pretrained`` keys passed through unchanged.
PASSTHROUGH_ARGS = ("attn_implementation", "low_cpu_mem_usage", "use_safetensors", "cache_dir",
                    "local_files_only", "token", "variant", "device_map")


def strict_bool(model: str, name: str, value: Any) -> bool:
    """``true``/``false`` (as lm-eval parses them) or 0/1; anything else is an error."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ConfigError(f"{model}: model arg {name}={value!r} is not a boolean; use "
                      f"{name}=true or {name}=false")


def _number(model: str, name: str, value: Any, *, minimum: float = 0.0) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < minimum:
        raise ConfigError(f"{model}: model arg {name}={value!r} must be a number >= {minimum:g}"
                          f" (e.g. {name}=1.0)")
    return number


def recheck_fraction(model: str, value: Any) -> float:
    """The ``recheck`` share: a number in (0, 1] (0 would take answers unchecked)."""
    number = _number(model, "recheck", value)
    if not 0 < number <= 1:
        raise ConfigError(f"{model}: model arg recheck={value!r} must be in (0, 1] (e.g. "
                          "recheck=0.05); to measure every item, run without answers_from")
    return number


def check_batch_size(model: str, value: Any) -> None:
    """A positive int, ``auto`` or ``auto:N`` (lm-eval would send everything at once for <= 0).

    Written as text (a flag, ``k=v`` model_args) it must be what ``int()`` reads, as lm-eval's
    models convert it; a YAML number may be a whole float (``8.0``).
    """
    text = str(value)
    if text == "auto" or (text.startswith("auto:") and _is_positive(text[5:])):
        return
    whole = _is_positive(text) and (not isinstance(value, str) or _reads_as_int(text))
    if not whole:
        raise ConfigError(f"{model}: batch_size={value!r} is not valid; use a positive integer, "
                          "auto or auto:N (e.g. --batch_size 8)")


def explicit_batch_size(value: Any) -> int | None:
    """The batch size the user asked for, or None where it is lm-eval's default or ``auto``.

    lm-eval's CLI passes its default as the int 1 and a typed ``--batch_size 1`` as the
    string "1" (the Python API's default is also the int 1), so an explicit batch of 1 is a
    string; any other positive size counts as asked for.
    """
    if value is None or str(value).startswith("auto") or (value == 1 and isinstance(value, int)):
        return None
    return int(value)


def _reads_as_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _is_positive(text: str) -> bool:
    try:
        return float(text) > 0 and float(text) == int(float(text))
    except (ValueError, OverflowError):  # not a number; inf
        return False


def check_pretrained(model: str, pretrained: Any, aliases: Sequence[str] = ()) -> None:
    """``pretrained=`` checked before loading: a local path must exist.

    Offline, any other value must be a folder, one of ``aliases`` (the model's own names) or in
    the hub cache.
    """
    if pretrained is None or not isinstance(pretrained, str):
        return
    path = Path(pretrained).expanduser()
    if pretrained.startswith(("/", "./", "../", "~")) or path.exists():
        if not path.exists():
            raise ConfigError(f"{model}: pretrained={pretrained!r}: the local path {path} does "
                              "not exist; pass an existing model folder or a hub id")
        problem = model_folder_problem(path)
        if problem:
            raise ConfigError(f"{model}: pretrained={pretrained!r}: {problem}; pass a model "
                              "folder holding config.json, the weights and the tokenizer (a "
                              "download or conversion that has finished)")
    elif hub_offline() and not Path(pretrained).expanduser().is_dir() \
            and pretrained not in aliases and not _in_hub_cache(pretrained):
        close = difflib.get_close_matches(pretrained, list(aliases), n=1)
        named = (f" or a packaged model ({', '.join(aliases)}), or leave pretrained= out for "
                 "the embedded model" if aliases else "")
        raise ConfigError(
            f"{model}: pretrained={pretrained!r} is no model folder"
            + (", packaged model" if aliases else "") + " or model in the Hugging Face cache, "
            "and the hub is offline (HF_HUB_OFFLINE)"
            + (f"; did you mean pretrained={close[0]}?" if close else
               f"; pass a model folder{named}"))


#: the files a transformers model folder holds its weights in
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json")


def model_folder_problem(path: Path) -> str | None:
    """What keeps transformers from loading a local model folder (None: nothing seen here).

    A file, a folder without ``config.json`` (or one without ``model_type``), or without any
    weights file: transformers' traceback after the tasks are built.
    """
    import json

    if not path.is_dir():
        return f"{path} is a file, not a model folder"
    config = path / "config.json"
    if not config.is_file():
        return f"{path} holds no config.json, so it is no transformers model folder"
    try:
        model_type = json.loads(config.read_text(encoding="utf-8")).get("model_type")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return f"{config} is not a readable JSON object"
    if not model_type:
        return f"{config} names no model_type, so transformers cannot tell the architecture"
    if not any(next(path.glob(pattern), None) for pattern in WEIGHT_FILES):
        return f"{path} holds no weights ({', '.join(WEIGHT_FILES[:2])})"
    return None


def hub_offline() -> bool:
    """Whether the Hugging Face hub is switched off (``HF_HUB_OFFLINE``, as huggingface_hub reads it)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "on", "yes", "true")


def _in_hub_cache(repo_id: str) -> bool:
    """Whether the Hugging Face cache holds the repository's ``config.json``."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except ValueError:  # not a valid repository id
        return False


@dataclass(frozen=True)
class MeteredArgs:
    """The model args every metered backend adds to its lm-eval model's (``docs/``).

    A backend with more declares a subclass; :meth:`split` takes its keys out of the model
    args, :meth:`checked` checks every value before anything is loaded.
    """

    #: no ``pretrained``: the embedded SmolLM2 (a schema without one needs ``pretrained``, and its
    #: advice names no packaged model, which are text models)
    EMBEDDED_DEFAULT: ClassVar[bool] = True

    pretrained: Any = None
    chat_template: str = "auto"
    precision: str | None = None
    energy: str = "auto"
    idle_seconds: float = 3.0
    #: a second reading of every window: instantaneous power sampled in a thread (NVML)
    power_check: bool = False

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """This schema's model-arg names."""
        return tuple(field.name for field in dataclasses.fields(cls))

    @classmethod
    def split(cls, args: Mapping[str, Any]) -> tuple[Self, dict[str, Any]]:
        """This schema's args (unchecked) and the rest (the lm-eval model's)."""
        own = {key: value for key, value in args.items() if key in cls.names()}
        return cls(**own), {key: value for key, value in args.items() if key not in own}

    def checked(self, model: str, lm_args: Mapping[str, Any]) -> Self:
        """The same args with each value checked (numbers as floats); raises ConfigError.

        ``lm_args`` are the lm-eval model's (its ``batch_size`` and ``device`` are checked
        here too).
        """
        ChatTemplatePolicy(self.chat_template, model)  # the policy checks its own mode
        check_choice("model arg energy", self.energy, ENERGY_SOURCES)
        check_batch_size(model, lm_args.get("batch_size", 1))
        if self.pretrained is None and not self.EMBEDDED_DEFAULT:
            raise ConfigError(f"{model}: pass --model_args pretrained=<model> "
                              "(there is no embedded default for this model type)")
        check_pretrained(model, self.pretrained,
                         list(packaged_models.PACKAGED) if self.EMBEDDED_DEFAULT else [])
        packaged_models.check_available(self.pretrained)
        if self.energy == "nvml":
            _check_nvml_device(model, lm_args.get("device"))
        if self.energy == "rapl":
            _check_rapl(model)
        power_check = strict_bool(model, "power_check", self.power_check)
        if power_check:
            _check_power_samples(model, lm_args.get("device"))
        return dataclasses.replace(
            self, idle_seconds=_number(model, "idle_seconds", self.idle_seconds),
            power_check=power_check)


#: CodeCarbon's own settings: they act only with ``codecarbon=true``
_CODECARBON_SETTINGS = ("codecarbon_country", "codecarbon_region", "carbon_intensity")


@dataclass(frozen=True)
class HFMeteredArgs(MeteredArgs):
    """The HF metered models' args: the common ones plus synchronisation and CodeCarbon."""

    sync: bool = True
    codecarbon: bool = False
    #: None: not given (CodeCarbon then uses the seed paper's CAN, ontario)
    codecarbon_country: str | None = None
    codecarbon_region: str | None = None
    carbon_intensity: float | None = None

    def codecarbon_location(self) -> tuple[str, str | None]:
        """CodeCarbon's grid location: the country and region given, else CAN, ontario."""
        if self.codecarbon_country is None:
            return "CAN", self.codecarbon_region or "ontario"
        return self.codecarbon_country, self.codecarbon_region

    def checked(self, model: str, lm_args: Mapping[str, Any]) -> Self:  # noqa: D102
        common = super().checked(model, lm_args)
        check_hf_args(model, lm_args, embedded=self.pretrained is None
                      or self.pretrained in packaged_models.PACKAGED)
        codecarbon = strict_bool(model, "codecarbon", self.codecarbon)
        unused = [name for name in _CODECARBON_SETTINGS if getattr(self, name) is not None]
        if unused and not codecarbon:
            raise ConfigError(f"{model}: model arg {unused[0]} sets CodeCarbon's cross-check, "
                              f"which is off: add codecarbon=true, or leave {unused[0]} out")
        return dataclasses.replace(
            common, sync=strict_bool(model, "sync", self.sync), codecarbon=codecarbon,
            carbon_intensity=None if self.carbon_intensity is None
            else _number(model, "carbon_intensity", self.carbon_intensity))


#: lm-eval's HF model args read as true/false (any other text fails only once requests run)
HF_SWITCHES = ("add_bos_token", "parallelize", "trust_remote_code", "use_fast_tokenizer",
               "truncation", "logits_cache")
#: the shortest context window (tokens) that holds a multiple-choice answer and some context
MIN_MAX_LENGTH = 16


def check_hf_args(model: str, lm_args: Mapping[str, Any], embedded: bool) -> None:
    """lm-eval's own HF model args that fail only after the load (or do nothing), checked.

    ``embedded``: the model is the embedded or a packaged one (local files, one version).
    """
    import importlib.util

    import torch

    for name in HF_SWITCHES:
        if name in lm_args:
            strict_bool(model, name, lm_args[name])
    length = lm_args.get("max_length")
    if length is not None and not (str(length).isdigit() and int(length) >= MIN_MAX_LENGTH):
        raise ConfigError(f"{model}: model arg max_length={length!r}: give a whole number of "
                          f"tokens, at least {MIN_MAX_LENGTH} (lm-eval asserts that each answer "
                          "fits), or leave it out for the model's own")
    if str(lm_args.get("backend", "causal")) not in ("causal", "default"):
        raise ConfigError(f"{model}: model arg backend={lm_args['backend']!r}: {model} runs "
                          "causal language models; leave backend out (or backend=causal)")
    if lm_args.get("parallelize") in (True, 1) and not torch.cuda.is_available():
        raise ConfigError(f"{model}: model arg parallelize=true spreads the model over CUDA "
                          "GPUs, and none is here; leave it out on the CPU")
    for name in ("peft", "delta"):
        if lm_args.get(name) and importlib.util.find_spec("peft") is None:
            raise ConfigError(f"{model}: model arg {name}= needs the peft package, which is not "
                              f"installed: pip install peft, or leave {name} out")
    if str(lm_args.get("attn_implementation", "")).startswith("flash_attention") and (
            importlib.util.find_spec("flash_attn") is None or not torch.cuda.is_available()):
        raise ConfigError(f"{model}: model arg attn_implementation="
                          f"{lm_args['attn_implementation']} needs the flash-attn package and "
                          "a CUDA GPU; use attn_implementation=sdpa (or eager), or leave it out")
    if embedded and lm_args.get("revision") not in (None, "main"):
        raise ConfigError(f"{model}: model arg revision={lm_args['revision']!r} names a hub "
                          "revision, and this model is the embedded or a packaged one (one "
                          "version, local files); leave revision out, or give pretrained=<hub "
                          "model>")


def rapl_problem() -> str | None:
    """Why this process cannot read RAPL counters (None: it can, and energy=rapl measures)."""
    from lm_eval_ext.metering.sources import RaplSource

    try:
        RaplSource()
    except OSError as exc:
        return str(exc)
    return None


def _check_rapl(model: str) -> None:
    """``energy=rapl`` needs RAPL counters this process can read (checked before the load)."""
    problem = rapl_problem()
    if problem is not None:
        raise ConfigError(f"{model}: energy=rapl needs RAPL counters this process can read "
                          f"({problem}); use energy=auto (RAPL where it can be read, else none), "
                          "or run where /sys/class/powercap/intel-rapl:*/energy_uj is "
                          "readable")


def _off_cuda(device: Any) -> str | None:
    """Where a model on ``device`` runs when that is not a CUDA GPU (None: it is one)."""
    import torch

    if torch.cuda.is_available() and not str(device or "cuda").startswith(("cpu", "mps")):
        return None
    return f"device={device or 'auto'}, CUDA available: {torch.cuda.is_available()}"


def _check_power_samples(model: str, device: Any) -> None:
    """``power_check=true`` samples a CUDA GPU's power through NVML: it needs one."""
    where = _off_cuda(device)
    if where is not None:
        raise ConfigError(f"{model}: power_check=true samples a GPU's power through NVML, and "
                          f"this run has none ({where}); leave power_check out, or run on a "
                          "CUDA GPU")


def _check_nvml_device(model: str, device: Any) -> None:
    """``energy=nvml`` needs the model on a CUDA GPU."""
    where = _off_cuda(device)
    if where is not None:
        rapl = " or energy=rapl" if rapl_problem() is None else ""
        raise ConfigError(f"{model}: energy=nvml needs the model on a CUDA GPU ({where});"
                          f" use energy=auto{rapl} on the CPU")


def init_params(cls: type) -> set[str]:
    """Keyword parameters of every ``__init__`` along the MRO of an lm-eval model class."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None:
            names |= {p for p in inspect.signature(init).parameters
                      if p not in ("self", "kwargs", "args")}
    return names


#: lm-eval's generation kwargs (``--gen_kwargs``; a task's ``generation_kwargs``), which a
#: researcher may put in ``--model_args`` by mistake
GENERATION_KWARGS = ("max_gen_toks", "until", "do_sample", "temperature", "top_p", "top_k",
                     "num_beams", "max_new_tokens", "repetition_penalty")


#: transformers' quantisation keywords, and the precision= that does their work here
QUANTISATION_ARGS = {"load_in_8bit": "precision=int8", "load_in_4bit": "precision=nf4 (or fp4)",
                     "bnb_4bit_quant_type": "precision=nf4 or precision=fp4",
                     "quantization_config": "precision=int8, nf4 or fp4 (bitsandbytes)"}


def check_unknown_args(model: str, cls: type, given: Mapping[str, Any],
                       own: Iterable[str] = ()) -> None:
    """Every key of ``given`` is ``own``, a keyword of an ``__init__`` of ``cls`` or a pass-through."""
    valid = init_params(cls) | set(own) | set(PASSTHROUGH_ARGS)
    unknown = sorted(set(given) - valid)
    if "" in unknown:  # `--model_args '='` or a stray comma-equals: a key with no name
        raise ConfigError(f"{model}: a model arg has an empty name (e.g. '=' or ',=x'); write "
                          "KEY=VALUE pairs, e.g. --model_args precision=bf16,idle_seconds=0")
    settings = [u for u in unknown if u in TASK_SETTING_KEYS]
    if settings:
        raise ConfigError(f"{model}: {settings[0]} is a task setting, not a model arg: pass "
                          f"--metadata '{{\"{settings[0]}\": \"cot\"}}' instead of --model_args")
    generation = [u for u in unknown if u in GENERATION_KWARGS]
    if generation:
        raise ConfigError(f"{model}: {generation[0]} is a generation setting, not a model arg: "
                          f"pass --gen_kwargs {generation[0]}=VALUE instead of --model_args (a "
                          "campaign: the lm_eval block's or a condition's gen_kwargs)")
    quantising = [u for u in unknown if u in QUANTISATION_ARGS]
    if quantising:  # what an HF user types; transformers 5 no longer takes it
        name, value = quantising[0], given[quantising[0]]
        off = value is False or str(value).strip().lower() in ("false", "0", "none", "")
        fix = (f"leave it out ({name}={value} asks for no quantisation, the default)" if off
               else f"leave it out and give {QUANTISATION_ARGS[name]}")
        raise ConfigError(f"{model}: {name} is not a model arg here (transformers 5 no longer "
                          f"takes it): {fix}")
    if unknown:
        close = {u: difflib.get_close_matches(u, valid, n=1) for u in unknown}
        named = ", ".join(f"{u} (did you mean {close[u][0]}?)" if close[u] else u for u in unknown)
        raise ConfigError(f"{model}: unknown model arg(s) {named}; "
                          f"valid: {', '.join(sorted(valid))}")


def merge_model_args(model: str, args: dict[str, Any],
                     additional_config: dict | None) -> dict[str, Any]:
    """``--model_args`` plus lm-eval's own flags, with a key given both ways explained.

    The stock path fails with "got multiple values for keyword argument" when a key such as
    ``batch_size`` is in both ``--model_args`` and lm-eval's own flags (``--batch_size``
    always has a value): the same value given twice is taken once, different values are an
    error naming the fix. lm-eval's own default ``--batch_size`` (the int 1) is no value given,
    so ``--model_args batch_size=8`` alone runs at 8.
    """
    args = dict(args)
    extra = {k: v for k, v in (additional_config or {}).items() if v is not None}
    if "batch_size" in args:  # a bad value is the error, whichever flag also gives one
        check_batch_size(model, args["batch_size"])
        if "batch_size" in extra and explicit_batch_size(extra["batch_size"]) is None \
                and not str(extra["batch_size"]).startswith("auto"):
            del extra["batch_size"]  # lm-eval's default of 1, not a choice: --model_args' stands
    for key in sorted(set(args) & set(extra)):
        if str(args[key]) != str(extra[key]):
            flag = f"--{key}"
            raise ConfigError(
                f"{model}: {key}={args[key]!r} in --model_args conflicts with lm-eval's "
                f"{flag} ({extra[key]!r}); pass it once, as {flag} {args[key]}")
        del args[key]
    return {**args, **extra}
