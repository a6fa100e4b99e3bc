"""Roles and policies: an agent = role + policy + memory; prompt assembly; model backends."""

from parley.agents.agent import Agent
from parley.agents.policies import Decision, FunctionPolicy, HumanPolicy, Policy
from parley.agents.prompt import Prompt

__all__ = ["Agent", "Decision", "FunctionPolicy", "HumanPolicy", "Policy", "Prompt"]
