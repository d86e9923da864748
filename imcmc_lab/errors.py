"""Error classes. Every message names the address(es) involved and says what to do."""


class ImcmcError(Exception):
    """Base class of imcmc-lab's errors."""


class AddressError(ImcmcError, KeyError):
    """An address that does not exist, or is used as both a leaf and a namespace."""

    def __str__(self):  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class DuplicateAddressError(ImcmcError):
    """The same address was sampled twice in one execution."""


class ConstraintError(ImcmcError):
    """A constraint (observation) at an address the program never visits."""


class DistributionError(ImcmcError, ValueError):
    """Invalid distribution parameters, or a NaN log-density, at an address."""


class TraceChangedError(ImcmcError):
    """A value a trace keeps was changed in place, which would leave the trace's cached
    log-densities wrong. Raised when a trace is used next (update, regenerate, a move) after a
    value it handed out -- ``trace[a]``, ``get_choices()``, the return value, ``trace.args``,
    ``update``'s or ``update_detailed``'s discard -- was changed, also through a NumPy view
    (``.numpy()``, ``np.asarray``) or a view of a slice; and at the end of a program body that
    changed in place a value it drew, an indexed family's value, or a value a sub-call returned
    (the message names the address and the line). Clone before changing (``.clone()``, a NumPy
    array ``.copy()``) or use an out-of-place operation (``x = x - m`` instead of ``x -= m``).
    """


class TransformError(ImcmcError):
    """A trace transform broke a rule of the transform language."""


class LabelError(TransformError):
    """A discrete choice read/written as continuous, or the reverse."""


class DimensionError(TransformError):
    """The continuous input and output coordinates of a transform differ in number."""


class InvolutionCheckError(ImcmcError):
    """``check_involution`` found a case where the transform is not an involution."""

    def __init__(self, message, report=None):
        super().__init__(message)
        self.report = report
