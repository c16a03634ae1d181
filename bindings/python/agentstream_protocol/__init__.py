"""The Agent Streaming Protocol's types as agentstream speaks it.

Generated from protocol/protocol.cddl by cddlgen (protocol.py); the
package's version is the protocol's.
"""

from .protocol import *  # noqa: F401,F403

__version__ = "0.1.0"
