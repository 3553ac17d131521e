"""The one base class for failures whose message is meant for the user (UI, CLI, API)."""


class PlaygroundError(ValueError):
    """Bad input or an impossible request: shown to the user as is, and the app keeps serving."""
