"""What a fit leaves on disk: checkpoints (``checkpoint``, the file format; ``checkpoint_header``,
what identifies a run; ``state_tree``, what a checkpoint holds of a state, and
``older_states``, the layouts older checkpoints hold; ``checkpoint_guard``, one writer at a
time) and saved fits (``saved_fit``, read by :func:`inference.load`). Nothing here runs code
from a file."""
