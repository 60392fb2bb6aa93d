"""The solver types (SolverParameter.type) and pycaffe's get_solver(file).

SGDSolver      "SGD"        momentum SGD, and the update sequence all rules share
NesterovSolver "Nesterov"
AdaGradSolver  "AdaGrad"
RMSPropSolver  "RMSProp"
AdaDeltaSolver "AdaDelta"
AdamSolver     "Adam"
"""

from __future__ import annotations

from caffe.solvers.adadelta import AdaDeltaSolver
from caffe.solvers.adagrad import AdaGradSolver
from caffe.solvers.adam import AdamSolver
from caffe.solvers.nesterov import NesterovSolver
from caffe.solvers.registry import get_solver, register_solver, solver_class, solver_type_list
from caffe.solvers.rmsprop import RMSPropSolver
from caffe.solvers.sgd import SGDSolver

__all__ = [
    "AdaDeltaSolver",
    "AdaGradSolver",
    "AdamSolver",
    "NesterovSolver",
    "RMSPropSolver",
    "SGDSolver",
    "get_solver",
    "register_solver",
    "solver_class",
    "solver_type_list",
]
