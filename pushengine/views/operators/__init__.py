"""The operators of a view's ``where``, one module each, in a registry.

``OPERATORS`` maps a name to its operator (base.py says what an operator
does). Importing this package registers the built-in ones; another module
registers its own with ``@register`` (docs/views.md, "Adding an operator").
"""
from pushengine.views.operators.base import (  # noqa: F401
    ALL, OPERATORS, ROLES, SESSION_USER, Condition, Move, Operator, ParamError, Predicate, Ref,
    SessionOperand, StoreIndex, ViewDefinitionError, bad_param, field_operators, finite,
    own_key_operators, parse_operand, register, resolve, scalar)

# the built-in operators, in the order error messages list them
from pushengine.views.operators import eq, in_, ne, ordering, has_word  # noqa: F401,E402
from pushengine.views.operators import near, visible_to, similar  # noqa: F401,E402
from pushengine.views.operators import audience, in_segment  # noqa: F401,E402
