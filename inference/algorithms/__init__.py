"""The built-in algorithms, one module each: closed-form CAVI and EM (``closed_form``), SVI
(``svi``), stochastic natural-gradient VI (``svi_natural``) and NUTS (``nuts``, with
``sampler_device`` for where a sampler runs fastest). Each defines an
:class:`inference.Algorithm` and registers it (``inference.registry``)."""
