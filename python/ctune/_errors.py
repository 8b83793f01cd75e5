"""The one exception type of the package."""


class CtuneError(Exception):
    """An error from ctune: a REST request the server refused (status is its
    HTTP status, code/message/path its error JSON), a server that cannot be
    reached (status None, code "unreachable"), or a local mistake (status
    None, code such as "bad_config" or "bad_checkpoint")."""

    def __init__(self, message, status=None, code=None, path=None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.path = path

    def __str__(self):
        head = " ".join(str(x) for x in (self.status, self.code) if x is not None)
        where = f" (at {self.path})" if self.path else ""
        return f"{head}: {self.message}{where}" if head else f"{self.message}{where}"

    def __repr__(self):
        return (f"CtuneError(status={self.status!r}, code={self.code!r}, "
                f"message={self.message!r}, path={self.path!r})")
