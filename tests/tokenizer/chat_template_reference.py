#!/usr/bin/env python3
"""Reference chat-template renderings for tests/tokenizer/chat-template-test.cpp.

Renders conversations with jinja2 the way Hugging Face transformers does (an immutable
sandboxed environment with trim_blocks, lstrip_blocks, bos_token/eos_token, raise_exception and
transformers' tojson) using:
  smollm    the default model's own tokenizer.chat_template (read with the gguf package)
  llama2    Meta's Llama-2-chat template (meta-llama/Llama-2-7b-chat-hf tokenizer_config.json)
  chatml    a plain ChatML template without a default system prompt
  llama3    Meta-Llama-3-8B-Instruct's template
  llama31   Llama-3.1-8B-Instruct's template (tools, date string, system extraction)
  qwen2     Qwen2-7B-Instruct's template
  qwen25    Qwen2.5-7B-Instruct's template (tools, tool calls)
  features  a template written here to exercise the interpreter: namespaces, loop variables,
            filters, tests, tojson, slices, arithmetic, methods, whitespace control
Writes OUT_DIR/chat.json and OUT_DIR/done.

usage: chat_template_reference.py GGUF_PATH OUT_DIR
"""
import json
import os
import sys

import gguf
import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

LLAMA2 = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
LLAMA31 = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates", "llama31.jinja")).read()
QWEN2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + "
    "message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")
QWEN25 = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates", "qwen25.jinja")).read()
FEATURES = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates", "features.jinja")).read()

CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."},
     {"role": "user", "content": "Another one?"}],
    [{"role": "system", "content": "You answer in German.\nAlways."},
     {"role": "user", "content": "  Guten Tag!  "}, {"role": "assistant", "content": " Hallo 👋 \n"},
     {"role": "user", "content": "Wie geht's?\n\nZeile 3"}],
    [{"role": "user", "content": "Code:\n```\nint main() {}\n```"}, {"role": "assistant", "content": "OK"}],
]


def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers' replacement for jinja2's html-escaping tojson
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def render(source, messages, add_generation_prompt):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                          bos_token="<s>", eos_token="</s>")


def main():
    gguf_path, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    r = gguf.GGUFReader(gguf_path)
    templates = {"smollm": r.fields["tokenizer.chat_template"].contents(), "llama2": LLAMA2, "chatml": CHATML,
                 "llama3": LLAMA3, "llama31": LLAMA31, "qwen2": QWEN2, "qwen25": QWEN25, "features": FEATURES}
    cases = []
    for name, source in templates.items():
        for conv in CONVERSATIONS:
            for gen in (True, False):
                cases.append({"template": name, "messages": conv, "add_generation_prompt": gen,
                              "text": render(source, conv, gen)})
    with open(os.path.join(out, "chat.json"), "w") as f:
        json.dump({"templates": templates, "cases": cases}, f)
    with open(os.path.join(out, "done"), "w") as f:
        f.write("ok\n")


if __name__ == "__main__":
    main()
