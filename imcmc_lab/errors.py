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
    """A value a trace handed out (``v = trace["mu"]``) was changed in place afterwards."""


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
