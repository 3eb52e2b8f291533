"""The default output caps are written down (agent/output_caps.py DEFAULT_CAPS) so a command's start-up check builds
no contract's JSON Schema; this holds the table to what the contracts give (issue 29)."""

from agent.output_caps import DEFAULT_CAPS, contract_caps
from schemas.states import STATES


def test_the_written_caps_are_the_contracts_caps():
    computed = contract_caps()
    assert list(computed) == list(STATES)
    assert list(DEFAULT_CAPS.items()) == list(computed.items()), (
        f"a contract changed its bounds: set DEFAULT_CAPS in agent/output_caps.py to {computed}"
    )
