"""The one exception readers raise for input they cannot use."""


class InputError(Exception):
    """A file that is missing, unreadable, truncated or of an unknown format.

    The CLI turns it into one line on stderr and exit code 2; the message must
    name the file and say what is wrong in words a user can act on.
    """


# What reading or analysing one bad file may raise; a batch lists the file and goes on.
READ_ERRORS = (InputError, OSError, MemoryError, RecursionError)
