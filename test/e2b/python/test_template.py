"""Template builds with the SDK's Template API, then sandboxes from them."""

import os
import uuid

import pytest

from e2b import BuildException, Sandbox, Template, TemplateException, wait_for_file, wait_for_port, wait_for_timeout

CTX = os.path.join(os.path.dirname(__file__), "tpl_ctx")
RUN_ID = uuid.uuid4().hex


def name():
    return f"py-tpl-{uuid.uuid4().hex[:8]}"


def test_build_and_create_with_start_command():
    n = name()
    logs = []
    t = (
        Template(file_context_path=CTX)
        .from_template("base")
        # RUN_ID makes the step new to this machine's build cache (images
        # stay in the shared templates dir), so its output is in the logs.
        .run_cmd(f"echo building-output-$((6*7)) {RUN_ID}")
        .copy("hello.txt", "/home/user/hello.txt")
        .copy("app", "/app/", user="root", mode=0o755)
        .set_envs({"FOO": "bar", "REF": "$FOO-x"})
        .set_workdir("/app")
        .set_user("user")
        .set_start_cmd("python3 -m http.server 8000", wait_for_port(8000))
    )
    info = Template.build(t, f"{n}:v1", cpu_count=2, memory_mb=1024, on_build_logs=logs.append)
    assert info.template_id == n
    assert info.tags == ["v1"]
    messages = "\n".join(str(entry) for entry in logs)
    assert "building-output-42" in messages

    assert Template.exists(n)
    assert not Template.exists(name())

    sbx = Sandbox.create(f"{n}:v1")
    try:
        r = sbx.commands.run(
            "id -un; pwd; echo $FOO $REF; cat /home/user/hello.txt; stat -c '%a' /app/main.py; "
            "curl -s -o /dev/null -w '%{http_code}' http://localhost:8000/"
        )
        assert r.stdout == "user\n/app\nbar bar-x\nhello from a template\n755\n200", r.stdout
    finally:
        sbx.kill()

    # A second build of the same template: every step cached.
    logs.clear()
    Template.build(t, f"{n}:v1", on_build_logs=logs.append)
    assert "building-output-42" not in "\n".join(str(e) for e in logs)

    # Tags: assign, list, remove.
    Template.assign_tags(f"{n}:v1", ["prod"])
    tags = {tag.tag for tag in Template.get_tags(n)}
    assert {"v1", "prod"} <= tags
    Template.remove_tags(n, ["prod"])
    assert "prod" not in {tag.tag for tag in Template.get_tags(n)}
    with Sandbox.create(f"{n}:v1") as s2:
        assert s2.commands.run("cat /home/user/hello.txt").stdout == "hello from a template\n"


def test_build_from_image_and_failure():
    n = name()
    # An image the registry does not have: the build is refused.
    with pytest.raises(BuildException) as e:
        Template.build(Template().from_image("127.0.0.1:9/nope:latest").run_cmd("true"), n)
    assert "cannot reach the registry of" in str(e.value)

    # A failing step: the exception says which, with the exit code.
    bad = Template().from_template("base").run_cmd("echo fine").run_cmd("echo broken >&2; exit 7")
    with pytest.raises(BuildException) as e:
        Template.build(bad, name())
    assert "exit code 7" in str(e.value)


def test_ready_file_and_default_tag():
    n = name()
    t = (
        Template()
        .from_template("base")
        .set_start_cmd("sleep 1; touch /tmp/ready; sleep infinity", wait_for_file("/tmp/ready"))
    )
    Template.build(t, n)
    sbx = Sandbox.create(n)
    try:
        assert sbx.commands.run("test -f /tmp/ready && echo ready").stdout == "ready\n"
        assert sbx.get_info().template_id == n
    finally:
        sbx.kill()


def test_build_from_base_image_with_tags_and_skip_cache():
    # E2B's test_build_template and TestTagsIntegration: from_base_image()
    # is E2B's e2bdev/base, which spaced builds from its own base template
    # (no registry: this machine cannot reach Docker Hub).
    n = name()
    t = (
        Template(file_context_path=CTX)
        .from_base_image()
        .copy("hello.txt", "folder/hello.txt", force_upload=True)
        .run_cmd(f"cat folder/hello.txt; echo base-image-{RUN_ID}")
        # E2B's test sets WORKDIR /app on an image without it: the build
        # makes it, owned by the USER (user), as BuildKit does.
        .set_workdir("/app")
        .set_start_cmd("echo 'Hello, world!'", wait_for_timeout(10_000))
    )
    logs = []
    info = Template.build(t, f"{n}:v1-{RUN_ID[:8]}", skip_cache=True, on_build_logs=logs.append)
    assert info.template_id == n and info.build_id
    # The copied file was read in the build (relative to the WORKDIR then).
    assert "hello from a template" in "\n".join(str(e) for e in logs)
    assert f"base-image-{RUN_ID}" in "\n".join(str(e) for e in logs)

    # skip_cache: the same template again runs every step again.
    logs.clear()
    Template.build(t, f"{n}:v1-{RUN_ID[:8]}", skip_cache=True, on_build_logs=logs.append)
    assert f"base-image-{RUN_ID}" in "\n".join(str(e) for e in logs)

    tag_info = Template.assign_tags(f"{n}:v1-{RUN_ID[:8]}", ["production", "latest"])
    assert tag_info.build_id and {"production", "latest"} <= set(tag_info.tags)
    assert "stable" in Template.assign_tags(f"{n}:v1-{RUN_ID[:8]}", "stable").tags
    with pytest.raises(Exception):
        Template.assign_tags(f"{n}:v1-{RUN_ID[:8]}", ":invalid-tag")
    with pytest.raises(Exception):
        Template.assign_tags(f"{n}:v1-{RUN_ID[:8]}", f"{n}:")

    with Sandbox.create(f"{n}:production") as sbx:
        r = sbx.commands.run("id -un; pwd; cat /home/user/folder/hello.txt; stat -c %U /app")
        assert r.stdout == "user\n/app\nhello from a template\nuser\n", r.stdout
