"""Op declarations: everything the adapters need to know of an op, written once.

An :class:`Op` names the public function (its signature and docstring, which both
frameworks take as they are), the arrays it passes to its plans, the plan builders of the
forward and the backward, which results it returns and which it saves for the backward, and
which inputs take gradients. ``ato_torch.ops.build`` and ``ato_jax.ops.build`` turn it into
a ``torch.autograd.Function`` and a ``jax.custom_vjp``; neither has op-specific code.

Names. The forward plan reads the arrays under the names in ``inputs`` and returns its
results in the order of ``results`` (names of the op's own choosing). The backward plan reads
the saved arrays under their names (an input's or a result's) and the cotangent of each
returned result under ``"d" + name``; it returns one gradient per name in ``differentiable``,
in that order.
"""

from __future__ import annotations

import dataclasses
import functools
import textwrap
from typing import Any, Callable, Mapping, Optional, Sequence, Tuple

from .launch import ArraySpec, Plan, row_major_strides


TRACED = ("Traced arguments: the arrays (under jax.jit or torch.compile one compiled kernel serves "
          "every value); any other argument is a Python value fixed when the call is traced (another "
          "value compiles again), unless its description says it may be an array.")


def forward_only(name: str):
    """The backward of an op that has none (inference ops, masks): raises, naming the op."""
    def backward(s, static, target):
        raise NotImplementedError(f"{name} is forward only: it has no gradient")
    return backward


def default_pack(static, outs: tuple):
    """The op's returned arrays as it returns them: one array, or a tuple of them."""
    return outs[0] if len(outs) == 1 else tuple(outs)


@dataclasses.dataclass(frozen=True, eq=False)
class Op:
    """One op, as both adapters build it.

    signature: the public function. It takes the user's arguments and returns
      ``(arrays, static)``: a tuple of arrays (or None for an absent optional one) in the
      order of ``inputs``, and a hashable value of everything else the plans need. It never
      looks inside an array, so it runs on torch tensors and JAX tracers alike.
    forward: ``(specs, static, target) -> Plan`` (``specs``: input name -> ArraySpec or None);
      with ``forward_takes_grad``, also ``grad=`` (whether the gradient will be wanted).
    backward: ``(specs, static, target) -> Plan``: the specs of every input, of the saved
      results and of the cotangents (None for an absent one). It may read only the saved
      arrays and the cotangents.
    optional: the inputs that may be None (absent); any other None is a TypeError naming it.
    returns: the results the op returns (a tuple of names, or a function of ``static``
      giving one); default: all of ``results``. pack: ``(static, returned arrays) -> what
      the op returns`` (default: the array, or a tuple of them).
    optional_cotangents: groups of cotangent names the backward plan can do without: a group
      whose cotangents are all absent is passed as None; any other absent cotangent is zeros.
    nondifferentiable: returned results that carry no gradient (a value for logging): torch
      marks them non-differentiable, JAX stops their gradient, and the backward plan gets
      their cotangents as None.
    random: inputs that carry a random seed (an integer array the kernel reads): ato_torch
      also takes a ``torch.Generator`` there (draws a seed from it on the first input's
      device), ato_jax a typed ``jax.random`` key (passed as its key data).
    unsaved: a function of ``static`` giving the names in ``saved`` that a call with it does
      not keep (the adapters save None there, and its backward may not read them): an input
      that only some calls' backward needs.
    single_backward: the backward overwrites a saved result in place, so it may run once (a
      function of (input specs, static) where that depends on them).
    check_values: ``(specs, static, host) -> None``, checks on input values where they are
      on the host already (``host(name)``: a NumPy array, or None where fetching it would
      cost a device synchronisation or the values are traced).
    reference: the float64-capable reference math, with the public signature.
    family: the op family (its folder under ato_core/ops), for ``ato check`` and ``ato bench``.
    batch: the inputs whose leading axis is a batch of independent problems, flattened
      batch-major into every result that has it (q, k, v of attention; x of a norm): ato_jax
      folds a ``jax.vmap``-ped axis into it (one launch). Empty: vmap runs slice by slice.
    batch_min_rank: the least rank at which those inputs' leading axis is a batch (2 for an op
      over the last axis of [..., N], whose 1-D input has no batch axis).
    """

    signature: Callable
    inputs: Tuple[str, ...]
    results: Tuple[str, ...]
    forward: Callable[..., Plan]
    backward: Callable[..., Plan]
    saved: Tuple[str, ...]
    differentiable: Tuple[str, ...]
    returns: Any = None
    pack: Callable = default_pack
    optional: Tuple[str, ...] = ()
    optional_cotangents: Tuple[Tuple[str, ...], ...] = ()
    nondifferentiable: Tuple[str, ...] = ()
    random: Tuple[str, ...] = ()
    forward_takes_grad: bool = False
    unsaved: Optional[Callable] = None
    single_backward: Any = False
    check_values: Optional[Callable] = None
    reference: Optional[Callable] = None
    family: str = ""
    batch: Tuple[str, ...] = ()
    batch_min_rank: int = 1

    def __post_init__(self):
        # the forward plan cache, keyed by (specs, static, target, grad)
        object.__setattr__(self, "cached_forward", functools.lru_cache(maxsize=1024)(self._build_forward))
        grads = tuple(self.differentiable.index(n) if n in self.differentiable else None for n in self.inputs)
        object.__setattr__(self, "input_grads", grads)
        object.__setattr__(self, "all_kept", (True,) * len(self.saved))

    @property
    def name(self) -> str:
        return self.signature.__name__

    @property
    def doc(self) -> str:
        """The public docstring: the declaration's, and what may be traced."""
        return (self.signature.__doc__ or "").rstrip() + "\n\n" + textwrap.fill(
            TRACED, 92, initial_indent="    ", subsequent_indent="    ")

    def returned(self, static) -> Tuple[str, ...]:
        """The names of the results the op returns, for this static value."""
        if self.returns is None:
            return self.results
        return self.returns(static) if callable(self.returns) else self.returns

    def kept(self, static) -> Tuple[bool, ...]:
        """For each name in ``saved``: whether a call with this static value keeps it."""
        if self.unsaved is None:  # (every call of most ops: no work on the host)
            return self.all_kept
        dropped = self.unsaved(static)
        return tuple(n not in dropped for n in self.saved)

    def backward_once(self, specs, static) -> bool:
        """Whether the backward of a call with these input specs may run only once
        (``single_backward``)."""
        sb = self.single_backward
        return bool(sb(specs, static) if callable(sb) else sb)

    def checks_values(self, target) -> bool:
        """Whether a call checks input values: only where they are on the host already (the
        interpreter; on a GPU a check would cost a synchronisation every call)."""
        return self.check_values is not None and target.interpret

    def cotangents(self, static) -> Tuple[str, ...]:
        return tuple("d" + name for name in self.returned(static))

    # -- plans ---------------------------------------------------------------------------

    def forward_plan(self, specs: Tuple[Optional[ArraySpec], ...], static, target, grad: bool = False) -> Plan:
        """The forward plan (cached on its arguments; arguments are checked when it is built,
        and a bad one raises every call)."""
        grad = grad and self.forward_takes_grad
        try:
            return self.cached_forward(specs, static, target, grad)
        except TypeError as exc:  # unhashable arguments: build without the cache
            if "unhashable" not in str(exc):
                raise
        return self._build_forward(specs, static, target, grad)

    def _build_forward(self, specs, static, target, grad) -> Plan:
        named = dict(zip(self.inputs, specs))
        plan = self.forward(named, static, target, grad=grad) if self.forward_takes_grad else \
            self.forward(named, static, target)
        self._check_plan(plan, "forward", [n for n, s in named.items() if s is not None], len(self.results))
        return plan

    def backward_plan(self, forward: Plan, specs: Tuple[Optional[ArraySpec], ...], static,
                      cotangents: Tuple[Optional[ArraySpec], ...], target) -> Plan:
        """The backward plan of ``forward`` (built by :meth:`forward_plan` from ``specs``) for
        cotangents of these specs (None: absent), memoised on the forward plan."""
        return forward.memoised(("backward", cotangents), lambda: self._build_backward(forward, specs, static,
                                                                                      cotangents, target))

    def result_spec(self, forward: Plan, name: str, device: str) -> ArraySpec:
        """The ArraySpec of a result as the forward plan writes it (row-major)."""
        buf = forward.buffer(forward.results[self.results.index(name)])
        return ArraySpec(buf.shape, buf.dtype, row_major_strides(buf.shape), device)

    def backward_specs(self, forward: Plan, specs, static, cotangents) -> dict:
        """What the backward builder is given: every input's spec, the saved results' and the
        cotangents' (None for an absent one)."""
        named = dict(zip(self.inputs, specs))
        device = next(s.device for s in specs if s is not None)
        for name in self.saved:
            if name not in named:
                named[name] = self.result_spec(forward, name, device)
        named.update(zip(self.cotangents(static), cotangents))
        return named

    def _build_backward(self, forward, specs, static, cotangents, target) -> Plan:
        named = self.backward_specs(forward, specs, static, cotangents)
        plan = self.backward(named, static, target)
        saved = [n for n, keep in zip(self.saved, self.kept(static)) if keep]
        readable = [n for n in (*saved, *self.cotangents(static)) if named.get(n) is not None]
        self._check_plan(plan, "backward", readable, len(self.differentiable))
        return plan

    def _check_plan(self, plan: Plan, which: str, available: Sequence[str], results: int) -> None:
        """A plan reads only what it is given and returns what the declaration says."""
        missing = sorted(plan.external() - set(available))
        if missing:
            raise TypeError(f"{self.name}: the {which} plan reads {missing}, which it is not given "
                            f"(given: {sorted(available)})")
        if len(plan.results) != results:
            raise TypeError(f"{self.name}: the {which} plan returns {len(plan.results)} results, "
                            f"the declaration names {results}")

    def absent_cotangents(self, static, present: Mapping[str, bool]) -> Tuple[str, ...]:
        """Of the absent cotangents, those the backward plan takes as None (whole optional
        groups); every other absent one must be zeros."""
        out = ["d" + n for n in self.nondifferentiable]
        for group in self.optional_cotangents:
            if not any(present.get(n, False) for n in group):
                out.extend(group)
        return tuple(out)
