"""What people run around the layer: the ``zoo`` command (``cli``, with ``cli_paths`` for the
files it reads and writes) and the conformance suite for model plugins (``conformance``)."""
