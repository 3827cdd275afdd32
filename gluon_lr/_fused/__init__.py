"""The fast update path of LrTrainer: flat contiguous buffers, one kernel call per run of equal (lr, wd).

For each context, the parameters that qualify are packed into flat 1-D buffers, one per (dtype, state layout):
weights, gradients and every optimizer-state slot. Each Parameter's ``data()``/``grad()`` and each
``updater.states[index]`` then ARE views (slice + reshape) into those buffers, so everything that reads or writes them
in place (autograd, kvstore push/pull, ``set_data``, ``load_parameters``, freezing's snapshot/restore) keeps working.
Inside a buffer the parameters are ordered by (lr_mult, wd_mult, index); a step computes every parameter's lr and wd
exactly as the optimizer does (update counts, schedule, Adam's bias correction) and calls one kernel per run of
consecutive parameters with equal values, so multipliers may change at any time.

Packing happens when the trainer is built (if the parameters are initialized and the kvstore will not update them),
else at the first update; later only for parameters whose ``grad_req`` leaves ``'null'`` through ``trainer.unfreeze``
(``FusedUpdate.regrad``). Packed arrays are never replaced again, because a ``hybridize(static_alloc=True,
static_shape=True)`` graph keeps writing the gradient arrays it bound (``FusedUpdate`` says when it rebinds): a
parameter frozen with ``grad_req='null'`` stays in its buffer, dormant, and gets its views back on unfreeze; arrays
replaced behind the trainer's back (``grad_req`` set directly, ``initialize(force_reinit=True)``) send that parameter
to the stock Updater. ``load_states`` only copies the loaded states into the views. A static_alloc graph built BEFORE
packing keeps writing the old gradient arrays: that is detected on the next update, the original arrays are given
back, a warning says so, and the stock loop runs from then on.

Kernels, with the same arithmetic as the stock loop (tests check each against the stock trainer: max diff 0.0):

- sgd (momentum or not), nag, adam, float32 and float64 on CPU: compiled kernels (``gluon_lr._fused._kernels``, numba,
  imported at the first CPU update), ONE pass over memory per flat group, each share of the runs on its own thread
  (``threads.thread_count()``: OMP_NUM_THREADS or the cores), with the operations, order and rounding of MXNet's
  ``MultiSGDKernel``/``SGDMomKernel``, ``SGDKernel``, ``NAGMomKernel`` and ``AdamUpdateKernel``. On resnet50_v1
  shapes (25.6M float32 parameters, 2 cores, ``bench/bench_step.py``) a step takes 0.20x the stock trainer's time for
  sgd-momentum and 0.16x for adam, 1.14x and 1.0x (paired per rep: 1.17x, 1.12x) the memory-bandwidth floor, as
  torch's fused optimizers do. The first step of a process also imports numba and loads the machine code from its
  cache (about 0.7 s in all), or compiles it, about a second per kernel and dtype, where no cache exists yet.
- the same on other devices, or without numba (a warning says so): MXNet's per-tensor operator (``sgd_mom_update``,
  ``adam_update``, ...; plain sgd: ``multi_sgd_update``, as stock aggregates it) on each flat run; for float32
  sgd-momentum and adam on CPU also a numpy implementation in cache-sized chunks (many passes over memory, but
  MXNet's CPU ``adam_update`` is compute-bound): each flat group times both on its first steps and keeps the
  faster. Stock Gluon's 4-tensor ``multi_sgd_mom_update`` is much slower on CPU than either.
- rmsprop (plain and centered): MXNet's per-tensor operator on each flat run; adagrad: the stock optimizer's own
  NDArray expressions on each flat run.
- float16 with ``multi_precision=True``: the ``mp_*`` operators for sgd/nag; the stock cast-update-cast recipe for
  adam/rmsprop/adagrad; the float32 master weights live in a flat buffer too.

Falls back to the stock loop (``gluon.Trainer._update``) for the whole step when: the kvstore updates the weights
(``update_on_kvstore=True``); an AMP loss scaler is attached; numpy-array mode is on; the optimizer is not exactly
one of ``SGD, NAG, Adam, RMSProp, AdaGrad`` (a subclass may change ``update``); an lr scheduler meets parameters
with unequal update counts; or after the static_alloc case above. Falls back per parameter (the stock Updater updates
it, in the same step) for: sparse storage, dtypes other than float32 and float64 (float16 only with
``multi_precision=True``), uninitialized parameters, arrays replaced behind the trainer's back, states of another
structure loaded by ``load_states``; ``grad_req='null'`` parameters are not updated.

Modules: ``base`` (groups, packing, state structures), ``update`` (``FusedUpdate``, the driver), and one per back-end:
``compiled`` (numba kernels in ``_kernels``), ``mxnet_ops`` (MXNet's operators), ``numpy_ops``; ``threads`` (the pool).
"""
from .update import FusedUpdate

__all__ = ["FusedUpdate"]
