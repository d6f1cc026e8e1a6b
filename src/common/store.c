/* placeholder */
typedef int placeholder_unit;
