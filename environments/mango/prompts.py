"""What the navigator reads: instructions, the walkthrough, the lists, the questions (seed 002's
templates, in the project's own words)."""

from __future__ import annotations

from parley.environments.mango.data import Question, Step

INSTRUCTIONS = """\
You are the navigator in a mapping and navigation quiz. You get the beginning of a walkthrough \
of a text adventure game: numbered steps, each with the command the player typed (ACT) and the \
game's reply (OBSERVATION). Read it to work out the map of the game: which places there are and \
which action leads from which place to which.

Then you answer questions about that map, one at a time. A destination question gives a place \
to start from and a list of actions, and asks where you end up. A route question gives two \
places and asks how to get from the first to the second. For both, spell out the whole \
trajectory as a JSON list with one object per move, each with the keys "location_before", \
"action" and "location_after", using only the actions and place names from the lists that come \
with the question, spelled exactly as there. Start your answer with "[" and write nothing else."""

WALKTHROUGH_HEAD = "WALKTHROUGH of {game}, steps 0 to {last}:"


def render_steps(steps: list[Step]) -> str:
    """The walkthrough as the navigator reads it: ``STEP NUM:`` / ``ACT:`` / ``OBSERVATION:``."""
    return "\n\n".join(
        f"STEP NUM: {s.num}\nACT: {s.act}\nOBSERVATION: {s.observation}" for s in steps
    )


def walkthrough_block(game: str, steps: list[Step]) -> str:
    last = steps[-1].num if steps else 0
    return f"{WALKTHROUGH_HEAD.format(game=game, last=last)}\n\n{render_steps(steps)}"


ACTIONS_HEAD = "Allowed actions, one per line:"
PLACES_HEAD = "Places, one per line:"


def lists_block(actions: list[str], places: list[str]) -> str:
    """The allowed actions and the places, one per line (names may hold commas)."""
    acts = "\n".join(f"- {a}" for a in actions)
    names = "\n".join(f"- {p}" for p in places)
    return f"{ACTIONS_HEAD}\n{acts}\n\n{PLACES_HEAD}\n{names}"


def read_lists(text: str) -> tuple[list[str], list[str]]:
    """The actions and places of a :func:`lists_block` inside ``text`` (empty if absent)."""

    def items(head: str) -> list[str]:
        if head not in text:
            return []
        out = []
        for line in text[text.rindex(head) + len(head) :].lstrip("\n").split("\n"):
            if not line.startswith("- "):
                break
            out.append(line[2:])
        return out

    return items(ACTIONS_HEAD), items(PLACES_HEAD)


def briefing(game: str, steps: list[Step], actions: list[str], places: list[str]) -> str:
    """What the navigator reads before the questions: the walkthrough, then the lists."""
    return f"{walkthrough_block(game, steps)}\n\n{lists_block(actions, places)}"


def question_text(q: Question, number: int) -> str:
    """One question and the answer format (seed 002, Examples 7 and 8)."""
    if q.kind == "df":
        listed = ", ".join(q.actions)
        ask = (
            f'Question {number}: Starting from "{q.src}", you perform these actions in this '
            f"order: [{listed}]. Where are you now?\n"
            "Answer with the trajectory: a JSON list with one object per action, in order, each "
            'with the keys "location_before", "action" and "location_after".'
        )
    else:
        ask = (
            f'Question {number}: How do you get from "{q.src}" to "{q.dst}"?\n'
            "Answer with the route: a JSON list with one object per move, in order, each with "
            'the keys "location_before", "action" and "location_after".'
        )
    return f'{ask}\nUse only the allowed actions and the places listed above, spelled as there. Start your answer with "[".'
