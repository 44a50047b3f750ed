"""The official A2A Python SDK (PyPI `a2a-sdk`) as a client of a Nyx5 house's A2A gateway.

tests/e2e/a2a.mjs runs it, one call per process, and reads the one JSON line it prints:

    a2a_client.py card   URL LOCAL                      the card, its JWS verified by the SDK
    a2a_client.py send   URL LOCAL TEXT [EXTRA_JSON]    SendMessage (EXTRA: {messageId, metadata}): the task
    a2a_client.py get    URL LOCAL TASK                 GetTask: the task
    a2a_client.py cancel URL LOCAL TASK                 CancelTask: the task

The card is resolved from `URL/agents/LOCAL/agent-card.json` and its signature verified with the
SDK's own verifier (PyJWT, EdDSA) against the house's key set at the `jku` it names; every call
then goes through the JSON-RPC interface the card declares.
"""

import asyncio
import json
import sys
import uuid

import httpx
from a2a.client import ClientConfig, create_client
from a2a.types import CancelTaskRequest, GetTaskRequest, SendMessageRequest
from a2a.utils.signing import create_signature_verifier
from google.protobuf.json_format import MessageToDict, ParseDict
from jwt.api_jwk import PyJWK


def key_provider(kid, jku):
    """The house's key `kid`, read from its key set `jku`."""
    keys = httpx.get(jku, timeout=10).json()["keys"]
    for k in keys:
        if k.get("kid") == kid:
            return PyJWK(k, algorithm="EdDSA")
    raise LookupError(f"no key {kid} at {jku}")


VERIFY = create_signature_verifier(key_provider, ["EdDSA"])


async def client_for(url, local, streaming=False):
    return await create_client(
        url,
        client_config=ClientConfig(streaming=streaming),
        relative_card_path=f"/agents/{local}/agent-card.json",
        signature_verifier=VERIFY,
    )


async def main(argv):
    verb, url, local = argv[1], argv[2], argv[3]
    if verb == "card":
        card = await httpx.AsyncClient().get(f"{url}/agents/{local}/agent-card.json")
        from a2a.client.card_resolver import parse_agent_card

        parsed = parse_agent_card(card.json())
        VERIFY(parsed)
        print(json.dumps({"verified": True, "card": MessageToDict(parsed)}))
        return
    client = await client_for(url, local, streaming=verb == "stream")
    try:
        if verb == "stream":
            # SendStreamingMessage: one JSON line per event, as it arrives, until the stream ends.
            message = {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": argv[4]}]}
            async for event in client.send_message(ParseDict({"message": message}, SendMessageRequest())):
                print(json.dumps(MessageToDict(event)), flush=True)
        elif verb == "send":
            message = {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": argv[4]}]}
            if len(argv) > 5:
                extra = json.loads(argv[5])
                message["messageId"] = extra.get("messageId", message["messageId"])
                if "metadata" in extra:
                    message["metadata"] = extra["metadata"]
            request = ParseDict({"message": message}, SendMessageRequest())
            task = None
            async for event in client.send_message(request):
                if event.HasField("task"):
                    task = event.task
            print(json.dumps(MessageToDict(task)))
        elif verb == "get":
            task = await client.get_task(GetTaskRequest(id=argv[4]))
            print(json.dumps(MessageToDict(task)))
        elif verb == "cancel":
            task = await client.cancel_task(CancelTaskRequest(id=argv[4]))
            print(json.dumps(MessageToDict(task)))
        else:
            raise SystemExit(f"unknown verb {verb}")
    finally:
        await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv))
