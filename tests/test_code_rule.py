"""benches/code_rule.py: the comparison it draws between the served rule and
counting every code is a real difference."""

from benches.code_rule import every_code
from flask_app.rag import evidence

ROUTER = "Arc AX3000 router. Dual band, four ports, IPv4 only out of the box."
MESH = "Arc R9 mesh. Three units cover a house; IPv6 is on by default."
P3 = "Pulse P3 earbuds. Rated IPX4: not for swimming."
P5 = "Pulse P5 earbuds. Rated IPX7: safe to swim with."


def test_every_code_counts_a_feature_the_served_rule_does_not() -> None:
    question = "Does it support IPv6?"
    assert every_code(question, [ROUTER, MESH]) == [False, True]
    assert evidence.on_subject(question, [ROUTER, MESH]) == [True, True]


def test_both_rules_leave_a_siblings_sheet_out() -> None:
    question = "Can I swim with the P5?"
    assert every_code(question, [P3, P5]) == evidence.on_subject(question, [P3, P5])
    assert evidence.on_subject(question, [P3, P5]) == [False, True]
