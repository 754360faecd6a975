"""The op table's Python half, generated from csrc/api/ops.def by build_ext.py
(`python build_ext.py` rewrites it): edit the table, not this file."""

# The op codes, in row order (tapes store them: never renumbered).
LEAF = 0
DEAD = 1
ADD = 2
SUB = 3
MUL = 4
DIV = 5
POW = 6
ADDC = 7
RSUBC = 8
MULC = 9
RDIVC = 10
POWC = 11
RPOWC = 12
RELU = 13
TANH = 14
EXP = 15
LOG = 16
SIGMOID = 17
SIN = 18
COS = 19
SQRT = 20
ABS = 21
MAX = 22
MIN = 23
DIVC = 24
CUSTOM = 25
LOG1P = 26
DETACH = 27
TAKE = 28

__all__ = ["LEAF", "DEAD", "ADD", "SUB", "MUL", "DIV", "POW", "ADDC", "RSUBC", "MULC", "RDIVC",
           "POWC", "RPOWC", "RELU", "TANH", "EXP", "LOG", "SIGMOID", "SIN", "COS", "SQRT", "ABS",
           "MAX", "MIN", "DIVC", "CUSTOM", "LOG1P", "DETACH", "TAKE"]
IDENTS = tuple(__all__)   # (checked against the compiled table at import: tapead._c)

# FORMS[op]: how a row of op shows in a Wengert list and an error message
# ({x}, {y} its inputs, {c} its constant).
FORMS = (
    '',                # LEAF
    '',                # DEAD
    '{x} + {y}',       # ADD
    '{x} - {y}',       # SUB
    '{x} * {y}',       # MUL
    '{x} / {y}',       # DIV
    '{x} ** {y}',      # POW
    '{x} + {c}',       # ADDC
    '{c} - {x}',       # RSUBC
    '{x} * {c}',       # MULC
    '{c} / {x}',       # RDIVC
    '{x} ** {c}',      # POWC
    '{c} ** {x}',      # RPOWC
    'ReLU({x})',       # RELU
    'tanh({x})',       # TANH
    'exp({x})',        # EXP
    'log({x})',        # LOG
    'sigmoid({x})',    # SIGMOID
    'sin({x})',        # SIN
    'cos({x})',        # COS
    'sqrt({x})',       # SQRT
    'abs({x})',        # ABS
    'max({x}, {y})',   # MAX
    'min({x}, {y})',   # MIN
    '{x} / {c}',       # DIVC
    '',                # CUSTOM
    'log1p({x})',      # LOG1P
    'detach({x})',     # DETACH
    '',                # TAKE
)

# SHOW[op](x, y, c): FORMS[op] filled in, as an f-string (five times faster than
# str.format, for the Wengert list's rows).
SHOW = (
    lambda x, y, c: f'',                # LEAF
    lambda x, y, c: f'',                # DEAD
    lambda x, y, c: f'{x} + {y}',       # ADD
    lambda x, y, c: f'{x} - {y}',       # SUB
    lambda x, y, c: f'{x} * {y}',       # MUL
    lambda x, y, c: f'{x} / {y}',       # DIV
    lambda x, y, c: f'{x} ** {y}',      # POW
    lambda x, y, c: f'{x} + {c}',       # ADDC
    lambda x, y, c: f'{c} - {x}',       # RSUBC
    lambda x, y, c: f'{x} * {c}',       # MULC
    lambda x, y, c: f'{c} / {x}',       # RDIVC
    lambda x, y, c: f'{x} ** {c}',      # POWC
    lambda x, y, c: f'{c} ** {x}',      # RPOWC
    lambda x, y, c: f'ReLU({x})',       # RELU
    lambda x, y, c: f'tanh({x})',       # TANH
    lambda x, y, c: f'exp({x})',        # EXP
    lambda x, y, c: f'log({x})',        # LOG
    lambda x, y, c: f'sigmoid({x})',    # SIGMOID
    lambda x, y, c: f'sin({x})',        # SIN
    lambda x, y, c: f'cos({x})',        # COS
    lambda x, y, c: f'sqrt({x})',       # SQRT
    lambda x, y, c: f'abs({x})',        # ABS
    lambda x, y, c: f'max({x}, {y})',   # MAX
    lambda x, y, c: f'min({x}, {y})',   # MIN
    lambda x, y, c: f'{x} / {c}',       # DIVC
    lambda x, y, c: f'',                # CUSTOM
    lambda x, y, c: f'log1p({x})',      # LOG1P
    lambda x, y, c: f'detach({x})',     # DETACH
    lambda x, y, c: f'',                # TAKE
)

# The ops whose domain and range errors read as float ** 's, not math's.
POW_LIKE = frozenset((POW, POWC, RPOWC))

# The unary ops' Value methods and tapead functions: (name, op).
UNARY = (
    ('relu', RELU),
    ('tanh', TANH),
    ('exp', EXP),
    ('log', LOG),
    ('sigmoid', SIGMOID),
    ('sin', SIN),
    ('cos', COS),
    ('sqrt', SQRT),
    ('abs', ABS),
    ('log1p', LOG1P),
    ('detach', DETACH),
)
