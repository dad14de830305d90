"""A small LangGraph graph for test_graph.py: a planner that asks for a tool
call, a ToolNode that runs it (no network, no model), and a review node that
interrupts for a human's answer. Run as a script, it resumes a thread in a
process of its own:

    LG_TEST_DB=<db> python lg_graph.py THREAD_ID ANSWER

builds the same graph on the ledger ``LG_TEST_DB`` names (in the environment,
never on the command line: a PostgreSQL URL holds a password), resumes the
thread with ``Command(resume=ANSWER)`` and prints the final messages as JSON.
"""

from __future__ import annotations

import json
import os
import sys

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt


@tool
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


def plan(state: MessagesState):
    return {
        "messages": [
            AIMessage(
                id="plan-1",
                content="",
                tool_calls=[{"name": "add", "args": {"a": 2, "b": 3}, "id": "call-1"}],
            )
        ]
    }


def review(state: MessagesState):
    answer = interrupt({"question": "keep the sum?", "sum": state["messages"][-1].content})
    return {"messages": [AIMessage(id="review-1", content=f"sum {state['messages'][-1].content}, approved: {answer}")]}


def build(saver):
    g = StateGraph(MessagesState)
    g.add_node("plan", plan)
    g.add_node("tools", ToolNode([add]))
    g.add_node("review", review)
    g.add_edge(START, "plan")
    g.add_edge("plan", "tools")
    g.add_edge("tools", "review")
    g.add_edge("review", END)
    return g.compile(checkpointer=saver)


def summary(messages: list[BaseMessage]) -> list[list]:
    """Each message as [type, content, tool calls' args] (ids aside: the
    ToolNode's are random)."""
    return [
        [m.type, m.content, [c["args"] for c in getattr(m, "tool_calls", None) or []]]
        for m in messages
    ]


def main() -> None:
    from logbook_ledger.langgraph import LogbookSaver

    thread_id, answer = sys.argv[1], sys.argv[2]
    config = {"configurable": {"thread_id": thread_id}}
    with LogbookSaver.from_conn_string(os.environ["LG_TEST_DB"]) as saver:
        graph = build(saver)
        out = graph.invoke(Command(resume=answer), config)
        print(json.dumps({"pid": os.getpid(), "messages": summary(out["messages"])}))


if __name__ == "__main__":
    main()
