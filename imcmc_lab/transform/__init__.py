"""Transform layer: the read/write/copy/tcall language, its interpreter, Jacobians, checks."""

from .apply import Application, apply_transform
from .checks import InvolutionReport, check_involution, compare_choices
from .jacobian import Coordinate, JacobianRecord
from .language import (AddressRef, Transform, continuous, copy, discrete, exists, involution_from_bijections,
                       pair_bijections, read, tcall, transform, write)
