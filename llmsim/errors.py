"""Error types whose messages name the file, row or key at fault and what was expected."""


class LLMSimError(Exception):
    """Base class for every error llmsim raises on bad input."""


class ConfigError(LLMSimError, ValueError):
    """An impossible or malformed configuration (unknown key, model that does not fit, ...)."""


class TraceError(LLMSimError, ValueError):
    """A malformed trace file or row."""


class ProfileError(LLMSimError, ValueError):
    """A missing, corrupt or unknown profile."""
