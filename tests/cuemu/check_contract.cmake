# Checks that CUDA kernel files keep the contract of kernels/cuda/common.cuh
# (docs/cuda_emulation.md): what the emulation cannot run must not appear in
# their code (comments are ignored).
#   cmake -DFILES="a.cu|b.cu" -P check_contract.cmake
# Prints one line per violation (file:line: what) and "N violations"; exits 1
# if there are any.
set(TRI_RULES
  "<<<" "a launch with <<< >>> (use LAUNCH(kernel, grid, block, smem, stream, args...))"
  "__shared__" "__shared__ (use SHARED(type, name, count) or DYN_SMEM(type, name))"
  "__activemask" "__activemask (name the lanes in an explicit mask)"
  "__(shfl|shfl_up|shfl_down|shfl_xor|ballot|any|all)[ \t]*\\(" "a warp intrinsic without _sync (use the *_sync form with a mask)"
  "__syncwarp[ \t]*\\([ \t]*\\)" "__syncwarp() without a mask"
  "(^|[^A-Za-z0-9_])asm[ \t]*(volatile[ \t]*)?\\(" "inline assembly (tensor cores and cp.async through the wrappers of common.cuh)"
  "cooperative_groups|this_grid|grid_group" "cooperative groups / grid-wide sync")
list(LENGTH TRI_RULES n_items)
math(EXPR last "${n_items} - 1")
set(count 0)
string(REPLACE "|" ";" FILES "${FILES}")
foreach(f ${FILES})
  file(READ "${f}" text)
  # blank out comments, keeping line breaks so that line numbers hold
  string(REGEX MATCHALL "/\\*([^*]|\\*+[^*/])*\\*+/" blocks "${text}")
  foreach(b ${blocks})
    string(REGEX REPLACE "[^\n]" " " blank "${b}")
    string(REPLACE "${b}" "${blank}" text "${text}")
  endforeach()
  string(REGEX REPLACE "//[^\n]*" "" text "${text}")
  if(NOT text MATCHES "#include \"kernels/cuda/common.cuh\"")
    message("${f}: does not include kernels/cuda/common.cuh")
    math(EXPR count "${count} + 1")
  endif()
  # one list element per line: no ';', and no '[' ']' (which would keep a
  # list element open across lines)
  string(REPLACE ";" "," text "${text}")
  string(REPLACE "[" "(" text "${text}")
  string(REPLACE "]" ")" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(ln 0)
  foreach(line IN LISTS lines)
    math(EXPR ln "${ln} + 1")
    foreach(i RANGE 0 ${last} 2)
      math(EXPR j "${i} + 1")
      list(GET TRI_RULES ${i} re)
      list(GET TRI_RULES ${j} what)
      if(line MATCHES "${re}")
        message("${f}:${ln}: ${what}")
        math(EXPR count "${count} + 1")
      endif()
    endforeach()
  endforeach()
endforeach()
message("${count} violations")
if(count GREATER 0)
  message(FATAL_ERROR "CUDA kernel files break the contract of kernels/cuda/common.cuh")
endif()
