"""Device handling of a worker: which device it trains on (:mod:`.choice`), the local update on torch tensors
(:mod:`.torch_update`) and the one-time GPU costs paid before it joins (:mod:`.warmup`).  Engine: imports only
the engine (the device codecs of :mod:`rog.codecs` use :func:`rog.device.torch_update.check_flat_tensor`)."""
