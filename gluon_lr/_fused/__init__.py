"""The fast update path of LrTrainer: per-tensor tables, one kernel launch per (context, dtype, state structure).

No array is packed, replaced or viewed: every weight, gradient and optimizer state stays the NDArray that MXNet (or
the optimizer) made. At each update, ``FusedUpdate`` routes every parameter (``table.route``): those the back-ends
can take are grouped by (context, dtype, state structure) into ``table.Table``s, lists of tensors with their own
weight, gradient and state arrays and their lr and wd, computed exactly as the optimizer computes them (update
counts, schedule, Adam's bias correction); each table is updated in one launch. Multipliers may change at any time.

Why per-tensor tables and not flat buffers (the earlier design): MXNet built with MKLDNN (the pip build) reorders a
convolution weight IN PLACE into a blocked layout during an inference forward; on a weight that was a view into a
flat buffer it reordered the whole buffer, corrupting every parameter packed there
(``tests/gluon_lr/fused/test_fused_views.py``). A weight of its own may be reordered freely: before a kernel reads raw
memory, ``base.wait_all`` lets pending MXNet work finish and ``base.data_pointers`` asks MXNet for each array's
address (``MXNDArrayGetData``, which first brings a reordered array back to the default layout;
``tests/gluon_lr/fused/test_fused_cnn.py::TestMKLDNNLayout``). Gradients and states stay separate arrays too, though
nothing reorders them: packing them bought no speed (a kernel streams the same bytes either way) and replacing a
Parameter's gradient array is what a ``hybridize(static_alloc=True)`` graph does not follow (it keeps writing the
array it bound). With nothing replaced, ``load_states``, ``set_data``, ``freeze``/``unfreeze``, ``grad_req`` set
directly, ``initialize(force_reinit=True)`` and graphs built before the trainer need no bookkeeping: each update
reads the arrays the Parameters and the Updater hold then. A context's routing and tables (``plan.Plan``) are kept
from step to step while those are the same objects (compared by identity at every step; lr, wd, multipliers, the
schedule and hyperparameters are read at every step, every address is asked of MXNet at every step;
``tests/gluon_lr/fused/test_fused_plan.py`` changes each between steps). MXNet's per-array calls of a step (array
addresses, gradient freshness) run in compiled loops once numba is loaded (``_array_calls``).

Back-ends, with the arithmetic of the stock loop (tests check each against the stock trainer: max diff 0.0):

- sgd (momentum or not), nag, adam, float32 and float64 on CPU: compiled kernels (``mxupdate.kernels``, numba, shared with migrate's exact optimizers, imported at
  the first CPU update) that walk the table's rows of addresses in one pass over memory, on ``threads.thread_count()``
  threads (OMP_NUM_THREADS or the cores) that take the next of 8 shares per thread as they finish one (a thread the
  OS holds back leaves its work to the others), with the operations, order and rounding of
  MXNet's ``MultiSGDKernel``/``SGDMomKernel``, ``SGDKernel``, ``NAGMomKernel`` and ``AdamUpdateKernel``; lr and wd as
  the stock operator receives them (a tuple of ``multi_sgd_*`` correctly rounded, a scalar ``float`` parameter
  through dmlc's parser: ``base.param_float32``). ``bench/bench_step.py``, one run on 2 CPU cores (load average
  about 1.5), minima of 9 steps, ratios within the run: resnet50_v1 (25.6M float32 parameters in 193 tensors, all on
  this path) SGD-momentum 11.2 ms, 0.20x the stock step and 1.19x the memory-bandwidth floor, Adam 14.4 ms, 0.25x and
  1.06x (torch's fused optimizers: 14.4 and 23.1 ms); mobilenet_v2_1.0 (3.5M in 160 tensors, many small) 2.3 ms
  (0.18x) and 3.0 ms (0.19x); an MLP of 6 Dense(2048) layers (25.2M in 12 tensors) 9.8 ms (0.25x, 1.02x the floor)
  and 13.5 ms (0.29x, 1.04x). The first step of a process also imports numba and loads the machine code of the
  kernel and of ``_array_calls``' loops from numba's cache (``bench/bench_first_step.py``, resnet50_v1: kernel load
  0.29 to 0.30 s, then a first step of 0.11 to 0.19 s), or compiles it where no cache exists yet (0.70 to 0.72 s,
  then 0.20 to 0.25 s).
- GPUs (and CPU without numba, a warning says so): MXNet's operators on the same tables, the ones the stock
  optimizer calls: ``multi_sgd_update``/``multi_sgd_mom_update`` (and ``multi_mp_*``) on up to 60 tensors per call
  for sgd, the per-tensor ``nag_mom_update``, ``adam_update``, ... otherwise (``mxnet_ops``). Without numba, float32
  sgd-momentum and adam on CPU also have a numpy implementation in cache-sized chunks (``numpy_ops``): each table
  times both on its first steps and keeps the faster.
- rmsprop (plain and centered): MXNet's per-tensor operator; adagrad: the stock optimizer's own NDArray expressions.
- float16 with ``multi_precision=True``: the ``multi_mp_sgd_*``/``mp_nag_*`` operators, the stock cast-update-cast
  recipe for adam/rmsprop/adagrad, on the float32 master copies.

The whole step takes the stock loop (``gluon.Trainer._update``) when: the kvstore updates the weights
(``update_on_kvstore=True``); an AMP loss scaler is attached; numpy-array mode is on; the optimizer is not exactly one
of ``SGD, NAG, Adam, RMSProp, AdaGrad`` (a subclass may change ``update``); an lr scheduler meets parameters with
unequal update counts. One parameter takes the stock Updater (in the same step, with its own state arrays) when it
is sparse, of a dtype other than float32 and float64 (float16 only with ``multi_precision=True``), uninitialized, or
holds optimizer state of another structure (``load_states``); ``grad_req='null'`` parameters are not updated.
``FusedUpdate.paths`` (the ``update`` column of ``LrTrainer.explain()``) says which path each parameter takes.

Modules: ``table`` (routing, ``Route``, ``Table``), ``plan`` (``Plan``: a context's tables, kept across steps),
``update`` (``FusedUpdate``, the driver), ``base`` (array addresses, waits, MXNet's float parsing, the timed choice),
``_array_calls`` (MXNet's per-array calls in compiled loops), one module per back-end: ``compiled`` (numba kernels in
``mxupdate.kernels``), ``mxnet_ops``, ``numpy_ops``; the pool and the shares are ``mxupdate.threads``.
"""
from .update import FusedUpdate, stock_paths

__all__ = ["FusedUpdate", "stock_paths"]
