"""``Plan``: one context's tables and the parameters left to the stock Updater, kept across steps while they hold."""
from itertools import repeat
from operator import is_, itemgetter

from .table import Route, Table

#: A state the Updater does not hold (yet).
_MISSING = object()


class Plan:
    """The routing of one step on one context: its ``tables`` (in the order their tensors' lr and wd are computed,
    ``indices``) and the indices of the parameters ``rest`` to the stock Updater, reused at later steps while it holds.

    What a step's routing depends on: which parameters it updates (``todo``), the Updater, its optimizer and
    ``multi_precision``, and each parameter's weight and gradient arrays and Updater state, as objects: an NDArray's
    dtype, storage, shape, context and handle never change, and ``load_states``, ``set_data`` on a new context,
    ``initialize(force_reinit=True)``, ``reset_ctx`` and a ``grad_req`` change all install new objects. ``holds``
    compares all of these by identity, so a plan is reused only while none of them changed. A plan with a state
    whose structure can change in place (a list) is never reused. Nothing that can change without a new object is
    part of a plan: lr, wd, lr_mult, wd_mult, the scheduler and the update counts are read at every step, and every
    array's address is asked of MXNet at every step (``Table.addresses``: an MKLDNN reorder moves a weight's data in
    place).

    Examples:
        >>> plan = Plan(0, mx.cpu(), todo, trainer._params, updater, routes={})
        >>> plan.holds(todo, [trainer._params[i]._data[0] for i in todo], trainer._params, updater)  # next step
        True
    """

    def __init__(self, k: int, ctx, todo: list, params: list, updater, routes: dict):
        self.k, self.todo, self.updater = k, list(todo), updater
        self.optimizer, self.multi_precision = updater.optimizer, updater.optimizer.multi_precision
        tables, self.rest, self.reusable = {}, [], True
        for i in todo:
            param = params[i]
            known = routes.get((k, i))
            if known is None or not known.holds(param, k, updater):
                known = routes[(k, i)] = Route(k, i, param, updater)
            self.reusable = self.reusable and not known.mutable
            if known.key is None:
                self.rest.append(i)
                continue
            if known.key not in tables:
                tables[known.key] = Table(ctx, *known.key)
            tables[known.key].add(i, known.weight, known.grad, known.slots, known.size)
        self.tables = list(tables.values())
        self.indices = [t.index for table in self.tables for t in table.tensors]
        self.weights = [None if params[i]._data is None else params[i]._data[k] for i in todo]
        self.grads = [None if params[i]._grad is None else params[i]._grad[k] for i in todo]
        self.states = [updater.states.get(i, _MISSING) for i in todo]

    def holds(self, todo: list, weights: list, params: list, updater) -> bool:
        """Whether this plan still routes the step that updates ``todo`` (their ``weights`` on this context, as the
        caller read them from the Parameters) with ``updater``: the same Updater, optimizer, ``multi_precision``,
        and weight, gradient and state objects (see the class)."""
        optimizer = updater.optimizer
        if not self.reusable or todo != self.todo or updater is not self.updater or optimizer is not self.optimizer \
                or optimizer.multi_precision != self.multi_precision or not all(map(is_, weights, self.weights)):
            return False
        grads = [params[i]._grad for i in todo]
        if None in grads:
            return False
        return (all(map(is_, map(itemgetter(self.k), grads), self.grads))
                and all(map(is_, map(updater.states.get, todo, repeat(_MISSING)), self.states))
                and all(map(updater.states_synced.get, todo, repeat(True))))
