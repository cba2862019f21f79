# CAI_CHECK_CFLAGS(VARIABLE, FLAGS)
# Appends to VARIABLE each flag of FLAGS that the C compiler accepts
# without a warning turned error.
AC_DEFUN([CAI_CHECK_CFLAGS], [
  AC_LANG_PUSH([C])
  for cai_flag in m4_normalize([$2]); do
    AC_MSG_CHECKING([whether $CC accepts $cai_flag])
    cai_save_CFLAGS=$CFLAGS
    CFLAGS="$CFLAGS -Werror $cai_flag"
    AC_COMPILE_IFELSE([AC_LANG_PROGRAM([], [])],
      [AC_MSG_RESULT([yes]); $1="$$1 $cai_flag"],
      [AC_MSG_RESULT([no])])
    CFLAGS=$cai_save_CFLAGS
  done
  AC_LANG_POP([C])
])
