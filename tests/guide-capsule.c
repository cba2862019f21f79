/* Compiles the capsule example of docs/guide/c.rst (taken from the page
 * as guide-capsule-example.h) against Python.h; nothing loads it. */
#include "guide-capsule-example.h"

PyObject *guide_tensor_capsule(DLManagedTensorVersioned *t);

PyObject *guide_tensor_capsule(DLManagedTensorVersioned *t)
{
    return tensor_capsule(t);
}
