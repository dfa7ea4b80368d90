"""The errors patching raises: a leaf module (it imports nothing of the package), so that
every module of patching/ can raise them without importing another that imports it back."""


class PatchError(RuntimeError):
    """The core cannot be patched or restored as asked; nothing was changed."""


class DiffError(ValueError):
    """The patch does not apply to the text it was given."""


def os_error_reason(err: OSError) -> str:
    """What an OSError says, on one line: ``Permission denied: /path`` (or its message)."""
    if err.strerror and err.filename:
        return f"{err.strerror}: {err.filename}"
    return err.strerror or str(err)
