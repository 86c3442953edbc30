#!/usr/bin/env python3
"""Real clients through the gateway (pinned in requirements.txt): the OpenAI Agents SDK's
chat-completions model with a Pydantic `output_type`, run whole and streamed, against a model
translated to Anthropic and one relayed to an OpenAI-compatible upstream; and the `llm` CLI,
streaming and not, against both. Tracing and every other outside call are off; all traffic
goes to the gateway on 127.0.0.1.

Prints one line per check; exits 0 when all passed, 1 when one failed, 2 when it could not
run. Configuration:

    AISIX_REAL_BASE_URL          the gateway's origin
    AISIX_REAL_API_KEY           the key to present
    AISIX_REAL_ANTHROPIC_MODEL   a model served by the Anthropic upstream
    AISIX_REAL_OPENAI_MODEL      a model served by the OpenAI-compatible upstream (scripted by
                                 the test to answer the two agent runs with a City as JSON)
    AISIX_REAL_LLM_TEXT          the text both upstreams answer `llm` with
    AISIX_REAL_WORKDIR           a scratch folder (llm's configuration lives there)
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import traceback
from pathlib import Path

os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"

try:
    import pydantic
    from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from openai import AsyncOpenAI
except ImportError:  # pragma: no cover - depends on the environment
    print("run `bash scripts/setup-python.sh` and use target/e2e-venv/bin/python", file=sys.stderr)
    sys.exit(2)


class City(pydantic.BaseModel):
    name: str
    population: int


def main() -> int:
    env = os.environ.get
    base, key = env("AISIX_REAL_BASE_URL"), env("AISIX_REAL_API_KEY")
    to_anthropic, to_openai = env("AISIX_REAL_ANTHROPIC_MODEL"), env("AISIX_REAL_OPENAI_MODEL")
    llm_text, workdir = env("AISIX_REAL_LLM_TEXT"), env("AISIX_REAL_WORKDIR")
    if not all([base, key, to_anthropic, to_openai, llm_text, workdir]):
        print("set every AISIX_REAL_* variable", file=sys.stderr)
        return 2
    set_tracing_disabled(True)

    def agent(model: str) -> Agent:
        # One client per run: each run has its own event loop, and a client's connections
        # belong to the loop that opened them.
        client = AsyncOpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=30)
        return Agent(
            name="cities",
            instructions="Name one city and its population.",
            model=OpenAIChatCompletionsModel(model=model, openai_client=client),
            output_type=City,
        )

    def agent_run(model: str) -> str:
        result = asyncio.run(Runner.run(agent(model), "A city?"))
        assert isinstance(result.final_output, City), result.final_output
        return repr(result.final_output)

    def agent_streamed(model: str) -> str:
        async def go() -> object:
            result = Runner.run_streamed(agent(model), "A city?")
            async for _ in result.stream_events():
                pass
            return result.final_output

        output = asyncio.run(go())
        assert isinstance(output, City), output
        return repr(output)

    # llm keeps its keys and extra models in LLM_USER_PATH.
    home = Path(workdir)
    (home / "keys.json").write_text('{"aisix": "%s"}' % key)
    (home / "extra-openai-models.yaml").write_text(
        "".join(
            f"- model_id: aisix-{name}\n  model_name: {name}\n  api_base: {base}/v1\n"
            f"  api_key_name: aisix\n"
            for name in (to_anthropic, to_openai)
        )
    )
    llm_env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "LLM_USER_PATH": str(home),
    }
    llm = str(Path(sys.executable).parent / "llm")

    def llm_prompt(model: str, stream: bool) -> str:
        args = [llm, "prompt", "-m", f"aisix-{model}", "--no-log"]
        if not stream:
            args.append("--no-stream")
        done = subprocess.run(
            args + ["Say hello."], env=llm_env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == llm_text, (done.stdout, done.stderr)
        return done.stdout.strip()

    checks = [
        ("agents sdk output_type, anthropic upstream", lambda: agent_run(to_anthropic)),
        ("agents sdk output_type streamed, anthropic upstream", lambda: agent_streamed(to_anthropic)),
        ("agents sdk output_type, openai upstream", lambda: agent_run(to_openai)),
        ("agents sdk output_type streamed, openai upstream", lambda: agent_streamed(to_openai)),
        ("llm, anthropic upstream", lambda: llm_prompt(to_anthropic, False)),
        ("llm streamed, anthropic upstream", lambda: llm_prompt(to_anthropic, True)),
        ("llm, openai upstream", lambda: llm_prompt(to_openai, False)),
        ("llm streamed, openai upstream", lambda: llm_prompt(to_openai, True)),
    ]
    failed = 0
    for name, check in checks:
        try:
            print(f"ok   {name}: {check()}")
        except Exception:  # noqa: BLE001 - every failure is reported the same way
            failed += 1
            print(f"FAIL {name}:\n{traceback.format_exc()}")
    print(f"{len(checks) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
