"""Roles and policies: an agent = role + policy + memory; prompt assembly; model backends."""

from agents.agent import Agent
from agents.policies import Decision, FunctionPolicy, HumanPolicy, Policy
from agents.prompt import Prompt

__all__ = ["Agent", "Decision", "FunctionPolicy", "HumanPolicy", "Policy", "Prompt"]
