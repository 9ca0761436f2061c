"""Exception types. Every message says what was wrong and how to fix it."""

from __future__ import annotations


class LmEvalExtError(Exception):
    """Base class for lm-eval-ext errors."""


class DataError(LmEvalExtError):
    """Benchmark data is missing, corrupt or inconsistent."""


class DataMissingError(DataError, FileNotFoundError):
    """A pinned upstream file is not where it should be and could not be downloaded."""


class DataCorruptError(DataError):
    """A pinned upstream file exists but its checksum or row count is wrong."""


class ManifestError(DataError):
    """A subset manifest does not match its fingerprint or the data."""


class ConfigError(LmEvalExtError, ValueError):
    """Bad user input: an unknown option, a conflicting setting, a bad value."""


def check_choice(name: str, value, allowed, hint: str = ""):
    """Return ``value`` if it is one of ``allowed``, else a ConfigError naming the valid ones."""
    if value not in allowed:
        raise ConfigError(f"{name}={value!r} is not valid; use one of {', '.join(allowed)}"
                          + (f" ({hint})" if hint else ""))
    return value
