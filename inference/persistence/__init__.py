"""What a fit leaves on disk: checkpoints (``checkpoint``, the file format; ``checkpoint_header``,
what identifies a run; ``checkpoint_guard``, one writer at a time) and saved fits
(``saved_fit``, read by :func:`inference.load`). Nothing here runs code from a file."""
