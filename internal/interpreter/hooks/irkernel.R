# Run by space-interpreter as a silent cell when an R kernel starts
# (kernel.go), called with the server's output limit in bytes. The R side
# of what startup/00-space.py does for Python: each execution's output
# together is cut a little under the server's limit (room for the
# messages' JSON), in UTF-8 bytes on a character boundary, before IRkernel
# pastes it, encodes it as JSON and sends it; at the cut the kernel sends a
# space_output_truncated message (the server then shows its marker once)
# and drops the execution's later output.
#
# Two places, both of this R process:
#   - IRkernel's Executor sends every message through its send_response
#     field: it is replaced by one that counts each execution's stream text
#     and display bundles (an execution starts with its execute_input) and
#     cuts there.
#   - evaluate (which IRkernel runs cells with) captures what a top-level
#     expression prints in a textConnection, and after it pastes the new
#     lines into one string, keeping every string it made: its watchout is
#     replaced by one that cuts the new lines to what is left before they
#     are pasted, and once the execution was cut, sinks the rest of what it
#     prints to the null device, so later output is not held at all.
# What one top-level expression prints is still held whole by R's
# textConnection (C code: R has no hook inside a connection's write) until
# the expression ends.
(function(limit) {
  bound <- max(limit - 65536, 1)
  ex <- NULL # the Executor running this cell
  for (f in rev(sys.frames())) {
    s <- get0(".self", envir = f, inherits = TRUE)
    if (inherits(s, "Executor")) {
      ex <- s
      break
    }
  }
  if (is.null(ex)) stop("space output hook: IRkernel's Executor not found")
  st <- new.env(parent = emptyenv()) # this execution's count
  st$id <- ""
  st$used <- 0
  st$cut <- FALSE

  # The start of the string s, at most n bytes of it, in whole characters.
  cut_bytes <- function(s, n) {
    if (n <= 0) return("")
    tryCatch({
      p <- substr(s, 1, n) # n characters have at least n bytes
      b <- nchar(p, type = "bytes")
      while (b > n) {
        k <- nchar(p)
        p <- substr(p, 1, min(k - 1, floor(k * n / b)))
        b <- nchar(p, type = "bytes")
      }
      p
    }, error = function(e) { # not valid in its encoding: by bytes
      r <- charToRaw(s)[seq_len(min(n, nchar(s, type = "bytes")))]
      iconv(rawToChar(r), "UTF-8", "UTF-8", sub = "")
    })
  }

  send <- ex$send_response
  mark <- function(parent) {
    send("space_output_truncated", parent, "iopub", stats::setNames(list(), character()))
  }
  size <- function(data) {
    sum(vapply(data, function(v) {
      if (is.character(v)) sum(nchar(v, type = "bytes")) else as.numeric(utils::object.size(v))
    }, 0))
  }
  ex$send_response <- function(msg_type, parent_msg, socket_name, content) {
    if (!identical(socket_name, "iopub")) {
      return(send(msg_type, parent_msg, socket_name, content))
    }
    id <- parent_msg$header$msg_id
    if (!identical(id, st$id)) {
      st$id <- id
      st$used <- 0
      st$cut <- FALSE
    }
    if (identical(msg_type, "stream")) {
      if (st$cut) return(invisible())
      text <- content$text
      if (length(text) != 1) text <- paste(text, collapse = "")
      n <- nchar(text, type = "bytes")
      left <- bound - st$used
      if (n <= left) {
        st$used <- st$used + n
        return(send(msg_type, parent_msg, socket_name, content))
      }
      st$cut <- TRUE
      content$text <- cut_bytes(text, left)
      rm(text)
      if (nzchar(content$text)) send(msg_type, parent_msg, socket_name, content)
      return(mark(parent_msg))
    }
    if (msg_type %in% c("display_data", "execute_result", "update_display_data")) {
      if (st$cut) return(invisible())
      n <- size(content$data)
      if (st$used + n <= bound) {
        st$used <- st$used + n
        return(send(msg_type, parent_msg, socket_name, content))
      }
      st$cut <- TRUE # a display is not cut: it goes whole or not at all
      return(mark(parent_msg))
    }
    send(msg_type, parent_msg, socket_name, content)
  }

  # The lines, cut to what is left of the bound (and a character more, so
  # that send_response above still sees them over it and marks the cut).
  precut <- function(lines) {
    if (st$cut) return(character())
    left <- bound - st$used
    b <- cumsum(as.numeric(nchar(lines, type = "bytes")) + 1)
    if (length(b) == 0 || b[length(b)] <= left) return(lines)
    k <- which(b > left)[1]
    lines <- lines[seq_len(k)]
    before <- if (k > 1) b[k - 1] else 0
    if (b[k] - 1 - before > left - before + 4) {
      lines[k] <- cut_bytes(lines[k], left - before + 4)
    }
    lines
  }
  ns <- asNamespace("evaluate")
  plot_snapshot <- get("plot_snapshot", envir = ns)
  # evaluate's watchout (0.20), with precut, and a null sink once cut.
  watchout <- function(debug = FALSE) {
    output <- character()
    prev <- character()
    con <- textConnection("output", "wr", local = TRUE)
    sink(con, split = debug)
    null <- NULL # the null device's connection, sunk on top of con once cut
    drop <- function() {
      if (is.null(null) && st$cut) {
        null <<- file(nullfile(), "w")
        sink(null)
      }
    }
    drop()
    list(get_new = function(plot = FALSE, incomplete_plots = FALSE,
                            text_callback = identity, graphics_callback = identity) {
      incomplete <- isIncomplete(con)
      if (incomplete) cat("\n", file = con)
      out <- list()
      if (plot) {
        out$graphics <- plot_snapshot(incomplete_plots)
        if (!is.null(out$graphics)) graphics_callback(out$graphics)
      }
      n0 <- length(prev)
      n1 <- length(output)
      if (n1 > n0) {
        new <- precut(output[n0 + seq_len(n1 - n0)])
        prev <<- output
        if (length(new) > 0) {
          out$text <- paste0(new, collapse = "\n")
          if (!incomplete) out$text <- paste0(out$text, "\n")
          text_callback(out$text)
        }
      }
      drop()
      unname(out)
    }, pause = function() {
      if (!is.null(null)) sink()
      sink()
    }, unpause = function() {
      sink(con, split = debug)
      if (!is.null(null)) sink(null)
    }, close = function() {
      if (!isOpen(con)) stop("something bad happened... did you use closeAllConnections()?")
      if (!is.null(null)) {
        sink()
        close(null)
      }
      sink()
      close(con)
      output
    }, get_con = function() con)
  }
  utils::assignInNamespace("watchout", watchout, ns = "evaluate")
  invisible()
})
