"""The machine's refusals, below every module that raises or catches them (the runner, replay, telemetry, the
kernel's error mapping): each message names the bad value; the CLI exits 2 on any of them."""


class InputError(ValueError):
    """Bad user input: the message names the bad value; the CLI exits 2."""


class SessionNotFound(InputError):
    pass


class NothingPending(InputError):
    pass


class ApprovalConflict(InputError):
    """The session moved on since the paused cycle read its portfolio: approving it is refused."""
