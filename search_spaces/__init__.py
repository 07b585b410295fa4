"""Search spaces: one module per space, each defining ``SPACE = Space(...)``.

Modules whose names start with an underscore hold shared declarations and are not spaces.
"""
