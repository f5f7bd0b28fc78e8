"""Write the prompts benchmark tools send, one JSON string per line, for measure.sh.

    prompts.py aiperf INPUTS_JSON OUT     # the user messages of an aiperf run's inputs.json
    prompts.py guidellm TOKENS N OUT      # N prompts as guidellm 0.8.1's synthetic source makes them

guidellm's `_create_prompt` (guidellm/data/deserializers/synthetic.py) asks a seeded Faker for
`text(max_nb_chars=tokens * 5 * 1.5 * attempt)` until it has enough tokens, then decodes the first
`tokens` of them with the target model's tokenizer; here that tokenizer is MiniLM's (the gateway
lower-cases for MiniLM anyway), the seed 1 + the prompt's index.
"""
import json
import os
import sys
from pathlib import Path


def aiperf(inputs):
    data = json.loads(Path(inputs).read_text())["data"]
    texts = []
    for session in data:
        for payload in session["payloads"]:
            users = [m["content"] for m in payload["messages"] if m["role"] == "user"]
            texts.append(users[-1])
    return texts


def guidellm(tokens, n):
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no "PyTorch was not found": only its tokenizer is used
    from faker import Faker
    from transformers import AutoTokenizer

    root = Path(__file__).resolve().parents[2]
    tok = AutoTokenizer.from_pretrained(str(root / ".deps" / "encoders" / "all-minilm-l6-v2"))
    texts = []
    for i in range(n):
        faker = Faker()
        faker.seed_instance(1 + i)
        ids, attempt = [], 0
        while len(ids) < tokens:
            attempt += 1
            text = faker.text(max_nb_chars=int(tokens * 5 * 1.5 * attempt))
            ids = tok.encode(text, add_special_tokens=False)
        texts.append(tok.decode(ids[:tokens], skip_special_tokens=True))
    return texts


def main(argv):
    if argv[:1] == ["aiperf"] and len(argv) == 3:
        texts, out = aiperf(argv[1]), argv[2]
    elif argv[:1] == ["guidellm"] and len(argv) == 4:
        texts, out = guidellm(int(argv[1]), int(argv[2])), argv[3]
    else:
        sys.exit(__doc__)
    Path(out).write_text("".join(json.dumps(t) + "\n" for t in texts))
    print(f"{out}: {len(texts)} prompts")


if __name__ == "__main__":
    main(sys.argv[1:])
