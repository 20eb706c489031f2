# Written by space-interpreter into the IPython profile of every kernel it
# starts; IPython runs it before the first cell. It must stay cheap: it
# imports nothing heavy (pandas, matplotlib and orjson are looked up only
# when a value of theirs is displayed), so a kernel starts fast.
#
# It adds:
#   - the module _space_interpreter, whose functions the server calls in
#     silent executions around a cell to set and restore environment
#     variables (values travel as JSON text, never spliced into code);
#   - the e2b/data formatter: a pandas DataFrame as {column: [values]};
#   - the e2b/chart formatter: a matplotlib Figure through e2b-charts;
#   - application/json for plain lists and dicts (numpy values included);
#   - Pillow images saved to a file shown as results, as E2B's are;
#   - a bound on what one execution writes to stdout and stderr (below);
#   - no output history (below).
# Names defined here are hidden from the user's namespace by IPython.


def _space_setup():
    import json
    import math
    import os
    import sys
    import types

    ip = get_ipython()  # noqa: F821 (IPython provides it to startup files)

    # --- no output history -------------------------------------------------
    # IPython 9 keeps every cell's stdout and stderr text, results and
    # displays in history_manager.outputs for the kernel's life (for
    # `%history -o`, whose database here is :memory:): a 200 MiB print
    # stayed in the kernel whole (it tees the write before the output
    # bound below cuts it), and so did every figure ever shown. The
    # sandbox's memory is shared by its kernels, so nothing is kept.
    # (Out, _ and _N, the values of cells, are kept as IPython keeps them.)
    class NoOutputs(dict):
        def __contains__(self, key):
            return False

        def __getitem__(self, key):
            return []

        def __setitem__(self, key, value):
            pass

    if hasattr(ip.history_manager, "outputs"):
        ip.history_manager.outputs = NoOutputs()

    # --- environment variables -------------------------------------------
    mod = types.ModuleType("_space_interpreter")
    state = {"global": {}, "saved": None}

    def set_global_env(text):
        # The sandbox's own env vars (they change when a sandbox restored
        # from a checkpoint is given to a caller): set the new ones, drop
        # the ones it no longer has.
        new = json.loads(text)
        for k in state["global"]:
            if k not in new:
                os.environ.pop(k, None)
        os.environ.update(new)
        state["global"] = new

    def set_env(text):
        values = json.loads(text)
        state["saved"] = {k: os.environ.get(k) for k in values}
        os.environ.update(values)

    def restore_env():
        saved, state["saved"] = state["saved"] or {}, None
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    mod.set_global_env, mod.set_env, mod.restore_env = set_global_env, set_env, restore_env
    sys.modules[mod.__name__] = mod

    # --- display formatters ----------------------------------------------
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName, Unicode

    def clean(v):
        # JSON has no NaN or infinity (Jupyter's packer refuses them), and
        # no timestamps: None and ISO text instead, str() for the unknown.
        if v is None or isinstance(v, (bool, int, str)):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else None
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        if isinstance(v, dict):
            return {str(k): clean(x) for k, x in v.items()}
        if hasattr(v, "isoformat"):
            try:
                return v.isoformat()
            except Exception:
                pass
        if hasattr(v, "item"):  # numpy scalars
            try:
                return clean(v.item())
            except Exception:
                pass
        return str(v)

    def dataframe(obj):
        pd = sys.modules.get("pandas")
        if pd is None or not isinstance(obj, pd.DataFrame):
            return None
        return clean(obj.to_dict(orient="list"))

    def figure(obj):
        mpl = sys.modules.get("matplotlib.figure")
        if mpl is None or not isinstance(obj, mpl.Figure):
            return None
        try:
            import warnings

            from e2b_charts import chart_figure_to_dict

            # Its pydantic models warn about numpy tick values: not the
            # user's warnings, so not in the cell's stderr.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                chart = chart_figure_to_dict(obj)
        except Exception:
            return None  # a figure e2b-charts cannot read still shows as PNG
        return clean(chart) if chart else None

    # The type is checked in __call__, not registered with for_type:
    # matplotlib-inline removes Figure from every formatter's registry when
    # it selects its figure formats. Nothing is imported to check it.
    class TypeFormatter(BaseFormatter):
        _return_type = (dict,)
        convert = None

        def __call__(self, obj):
            if not self.enabled:
                return None
            try:
                return type(self).convert(obj)
            except Exception:
                return None  # a value we cannot convert keeps its other formats

    class DataFormatter(TypeFormatter):
        format_type = Unicode("e2b/data")
        print_method = ObjectName("_repr_e2b_data_")
        convert = staticmethod(dataframe)

    class ChartFormatter(TypeFormatter):
        format_type = Unicode("e2b/chart")
        print_method = ObjectName("_repr_e2b_chart_")
        convert = staticmethod(figure)

    formatters = ip.display_formatter.formatters
    formatters["e2b/data"] = DataFormatter(parent=ip.display_formatter)
    formatters["e2b/chart"] = ChartFormatter(parent=ip.display_formatter)

    limit = int(os.environ.pop("SPACE_MAX_OUTPUT_BYTES", "0") or 0)
    bound = max(limit - (64 << 10), 1) if limit > 0 else 0

    def json_size(obj, most):
        # The size of obj as JSON, counted while it is encoded a piece at a
        # time by the standard library and given up past most (most + 1
        # then): no copy of a value too big to send is ever made whole.
        def stand_in(o):
            # numpy: an array as at least two characters an element
            # (never copied to a list), a scalar as its value.
            if getattr(o, "ndim", 0) and hasattr(o, "size"):
                return "#" * min(2 * int(o.size), most + 1)
            if hasattr(o, "item"):
                try:
                    return o.item()
                except Exception:
                    pass
            return str(o)

        enc = json.JSONEncoder(skipkeys=True, default=stand_in)
        n = 0
        for chunk in enc.iterencode(obj):
            n += len(chunk)
            if n > most:
                return most + 1
        return n

    def json_container(obj):
        # orjson, as E2B's (numpy values, keys that are not strings), but
        # only for a value whose JSON fits the output bound: orjson does
        # not raise when its copy does not fit in the kernel's memory, it
        # crashes the kernel (issue 27). A bigger one has no JSON form;
        # its text/plain is bounded at publishing (below).
        try:
            if bound and json_size(obj, bound) > bound:
                return None
            import orjson

            opts = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
            return orjson.loads(orjson.dumps(obj, option=opts)), {"expanded": True}
        except Exception:
            return None

    formatters["application/json"].for_type(list, json_container)
    formatters["application/json"].for_type(dict, json_container)

    # --- Pillow ----------------------------------------------------------
    # As E2B's template does (its startup script 0003_images.py): an image
    # a cell saves to a file by name (str, or here also a path object) is
    # displayed too, so it comes back as a PNG result, and show() never
    # starts an outside viewer (there is no display; Pillow's IPython
    # viewer shows it as a result instead). E2B imports Pillow at start;
    # here it is patched when a cell first imports it, so that a kernel
    # that never uses it does not pay for it.
    def patch_image(module):
        from IPython.display import display

        save = module.Image.save

        def space_save(self, fp, format=None, **params):
            if isinstance(fp, (str, os.PathLike)):
                display(self)
            return save(self, fp, format, **params)

        space_save.__doc__, space_save.__wrapped__ = save.__doc__, save
        module.Image.save = space_save

    def patch_imageshow(module):
        module.UnixViewer.show_file = lambda self, path, **options: 0

    patches = {"PIL.Image": patch_image, "PIL.ImageShow": patch_imageshow}

    class PillowHook:
        # A finder that finds nothing itself: it asks the others, and wraps
        # the loader of the two modules above so that they are patched
        # once they have run.
        def find_spec(self, name, path=None, target=None):
            patch = patches.get(name)
            if patch is None:
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            else:
                return None
            loader = spec.loader
            if loader is None or not hasattr(loader, "exec_module"):
                return spec
            run = loader.exec_module

            def exec_module(module):
                run(module)
                patches.pop(name, None)
                try:
                    patch(module)
                except Exception:
                    pass  # a Pillow we cannot patch still works unpatched
                if not patches and self in sys.meta_path:
                    sys.meta_path.remove(self)

            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, PillowHook())

    # --- output bound ----------------------------------------------------
    # ipykernel's OutStream keeps every write in one buffer until its IO
    # thread flushes it as one message, so one print of 200 MiB (or many
    # writes between two flushes) became one message of that size, and
    # packing it took several copies: past the kernel's RLIMIT_AS. The
    # server keeps only its output limit of each execution anyway, so the
    # kernel drops what is past it before it is buffered: each execution's
    # stdout and stderr together are cut a little under the server's limit
    # (room for the messages' JSON, so that the server does not cut again),
    # then a space_output_truncated message tells the server, which shows
    # its marker and drops the execution's later output as past its own
    # limit; the kernel drops later stream output itself until the next
    # cell. SPACE_MAX_OUTPUT_BYTES is the server's limit (0 or absent:
    # none).
    streams = [s for s in (sys.stdout, sys.stderr) if hasattr(s, "session")]
    if limit <= 0 or len(streams) != 2:
        return
    import threading

    lock = threading.Lock()
    used = {"n": 0, "cut": False}

    def reset(*_):
        with lock:
            used["n"], used["cut"] = 0, False

    # Only the user's cells: the server's silent executions print nothing.
    ip.events.register("pre_run_cell", reset)
    writes = [s.write for s in streams]  # OutStream's own, bound to each

    def keep(text):
        # The part of text that fits, and whether this write crossed the
        # bound; counted in UTF-8 bytes, as the server counts. A text with
        # more characters than bytes are left is cut before it is encoded:
        # no copy of the rest is made.
        with lock:
            if used["cut"]:
                return "", False
            left = bound - used["n"]
            part = text if len(text) <= left else text[:left]
            size = len(part) if part.isascii() else len(part.encode("utf-8", "surrogatepass"))
            if part is text and size <= left:
                used["n"] += size
                return text, False
            if size > left:
                part = part.encode("utf-8", "surrogatepass")[:left].decode("utf-8", "ignore")
            used["n"], used["cut"] = bound, True
            return part, True

    def mark():
        # After what was written before it: flushed first (the server
        # drops what comes after the mark), sent on the same IO thread.
        for s in streams:
            s.flush()
        out = streams[1]
        out.session.send(out.pub_thread, "space_output_truncated", {}, parent=out.parent_header, ident=out.topic)

    def bounded(write):
        def space_write(text):
            if not isinstance(text, str):
                return write(text)  # OutStream's own TypeError
            part, crossed = keep(text)
            if part is text:
                return write(text)
            if part:
                write(part)
            if crossed:
                mark()
            return len(text)

        return space_write

    # On the instances: print(), writelines and ipykernel's thread that
    # forwards what subprocesses write to fds 1 and 2 all call write.
    for s, w in zip(streams, writes):
        s.write = bounded(w)

    # --- rich output bound -----------------------------------------------
    # A display() or a cell's value whose bundle (text/html, an image, the
    # repr of a huge value, JSON) is over the bound is not sent: packing it
    # made several copies of it in the kernel. The server would drop it
    # anyway (a cut display is dropped whole), so the kernel sends the
    # truncation mark instead and drops the execution's later output, as
    # past the stream bound.
    def oversize(data):
        n = 0
        for v in (data or {}).values():
            if isinstance(v, (str, bytes)):
                n += len(v)
            else:
                n += json_size(v, bound - n)
            if n > bound:
                return True
        return False

    def refuse():
        with lock:
            crossed = not used["cut"]
            used["n"], used["cut"] = bound, True
        if crossed:
            mark()

    pub = ip.display_pub
    if hasattr(pub, "session"):
        publish = pub.publish

        def space_publish(data, metadata=None, *args, **kwargs):
            if oversize(data):
                return refuse()
            return publish(data, metadata, *args, **kwargs)

        pub.publish = space_publish

    hook = ip.displayhook
    if hasattr(hook, "session"):
        write_format_data = hook.write_format_data

        def space_write_format_data(format_dict, md_dict=None):
            if oversize(format_dict):
                # An empty bundle is not sent (finish_displayhook).
                refuse()
                return write_format_data({}, {})
            return write_format_data(format_dict, md_dict)

        hook.write_format_data = space_write_format_data


_space_setup()
del _space_setup
